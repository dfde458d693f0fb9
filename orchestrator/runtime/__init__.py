"""Agent runtimes (``typing.Protocol`` ``AgentRuntime`` in ``base.py``): ``process`` (uid or user-namespace
sandbox) and ``docker``, exercised by one shared suite
(tests/orchestrator/runtime/test_runtime_backends.py)."""
