"""The adapter to a real Gitea: the Forge protocol over Gitea's API, its webhooks, its answers' shapes."""
