"""``python -m orchestrator.worker --pool cpu --gateway URL --token-file FILE``: one job worker."""

from __future__ import annotations

import sys

from orchestrator.worker.worker import main

if __name__ == "__main__":
    sys.exit(main())
