"""The review gate: its rules, the policy's evaluation, kernels and their evidence, the ledger."""
