"""The vocabulary two processes must agree on, imported by both and importing nothing of the tree.

The verification harness (``orchestrator.verify``) may import nothing else of kswarm, and the gateway
nothing of the orchestrator; what both must mean the same way (a verdict's flags and evidence levels)
lives here instead of being restated on each side. Only plain values and types: no behaviour.
"""
