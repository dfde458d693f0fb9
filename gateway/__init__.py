"""kswarm gateway: the agents' only door (MCP, REST, SSE, LLM proxy, git hosting)."""
