"""``python -m agents``: the entry point of every agent process or container.

Configuration comes from what the orchestrator passes (``KSWARM_*`` variables, the token file, an
optional config file); see ``agents/config.py``. SIGTERM/SIGINT stop it with status 0.
"""

from __future__ import annotations

from agents.loop import serve


def main() -> None:
    raise SystemExit(serve())


if __name__ == "__main__":
    main()
