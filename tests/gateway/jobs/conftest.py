"""The job-runner fixtures (a gateway with forge + jobs, a kernels repo, worker processes, Slurm)."""

from kstest.jobs_fixtures import jobs_gw, kernels, slurm, workers

__all__ = ["jobs_gw", "kernels", "slurm", "workers"]
