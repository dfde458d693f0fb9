"""The swarm dir (``$KSWARM_HOME/swarm/``) and each agent's place in it: the layout and per-agent
provisioning (``provision.py``), fd-safe access to an agent's files (``agent_files.py``), the agent's
disk image (``disk.py``), the machine-wide uid blocks (``uid_ranges.py``).

Both the supervisor (``orchestrator/supervisor/``) and the agent runtimes (``orchestrator/runtime/``)
use it, and it imports neither: the runtimes are what the supervisor launches agents with.
"""
