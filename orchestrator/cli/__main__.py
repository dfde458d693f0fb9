"""``python -m orchestrator.cli``: the ``kswarm`` command (how ``kswarm up --detach`` restarts itself)."""

from orchestrator.cli.main import main

main()
