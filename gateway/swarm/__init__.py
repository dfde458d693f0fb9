"""The swarm as the gateway sees it: the supervisor's published status and its control stream.

This package is the seam between the orchestrator (which runs agents and owns their files) and the
gateway (which shows them and takes the operator's requests). Both sides import ``models`` and
``keys`` from here; the gateway imports nothing of ``orchestrator``. See docs/orchestrator.md
("The control stream") and docs/ui.md (the Agents panel).
"""
