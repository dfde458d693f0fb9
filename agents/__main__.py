"""``python -m agents``: the entry point of every agent process or container."""

from __future__ import annotations

import signal
import sys

from agents.heartbeat import AgentEnv, run


def main() -> None:
    # SIGTERM interrupts a blocking inbox wait and exits cleanly (status 0 = stopped, not crashed).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        run(AgentEnv.from_environ())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
