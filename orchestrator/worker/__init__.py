"""The job worker (``python -m orchestrator.worker``): takes a pool's jobs from the gateway, allocates
their devices, checks out the exact sha, runs the harness through an executor (local, docker, Slurm:
``executors/``) and records the result with one ``finish`` call. See docs/jobs.md.
"""
