"""Counterexamples (issue 27): a red-team agent's input that breaks an accepted kernel, confirmed by the
harness in a job, becomes a regression case of its task and withdraws the kernels it breaks."""
