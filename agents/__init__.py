"""The agent runtime: heartbeats and inbox now; the model loop arrives with the agent-runtime issue."""
