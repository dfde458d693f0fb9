"""The agent runtime (``python -m agents``): the loop, its tools, history and models, the Claude Code
runtime, and the session with the gateway (through ``gateway.client`` only)."""
