"""kswarm orchestrator: everything outside the gateway's process.

``supervisor/`` (``python -m orchestrator.supervisor``: the reconcile loop, operator actions, the swarm
seam, the pools' job workers), ``swarm_dir/`` (the swarm dir's layout, provisioning, disk images, uid
blocks; used by the supervisor and the runtimes), ``spec/`` (``swarm.yaml``), ``runtime/`` (the agent
backends: process, docker), ``sandbox/`` (the one sandbox), ``worker/`` (``python -m orchestrator.worker``,
a job worker), ``verify/`` (the harness), ``local/`` (``kswarm up``), ``cli/`` (``kswarm``), ``demo/``,
``templates/``.
"""
