"""The job runner: pools and their rules, a fair queue on Redis Streams, device allocation, executors
(local, docker, Slurm), workers, and the gateway plugin (REST ``/api/jobs``, MCP ``job_*``). See docs/jobs.md.
"""
