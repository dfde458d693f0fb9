"""The LLM proxy: the plugin, forwarding, streaming, key scrubbing, usage and budgets (docs/llm-proxy.md)."""
