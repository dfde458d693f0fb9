"""The ``kswarm`` command: one module per noun (``swarm``: up/init/down/ps/logs/agent, ``prs``,
``jobs``, ``tasks``, ``dataset``, ``demo``), assembled in ``main``."""

from orchestrator.cli.main import main

__all__ = ["main"]
