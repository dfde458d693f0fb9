"""The job runner's gateway side: pools and their rules, the fair queue on Redis Streams, submission
and the workers' wire (REST ``/api/jobs``, MCP ``job_*``), who may read a job, and what follows its
final state (evidence for the gate, the notice). The worker that runs jobs is ``orchestrator/worker``.
See docs/jobs.md.
"""
