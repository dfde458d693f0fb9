"""kswarm orchestrator: swarm spec, agent runtimes, review gate, jobs, dataset, CLI."""
