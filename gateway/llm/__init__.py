"""The LLM proxy's budget machinery (the proxy's other modules live in ``gateway/`` for now)."""
