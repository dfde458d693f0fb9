"""``python -m orchestrator.supervisor``: the supervisor's entry point (``main.py``)."""

import sys

from orchestrator.supervisor.main import main

sys.exit(main())
