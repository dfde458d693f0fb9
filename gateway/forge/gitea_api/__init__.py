"""The Gitea-compatible API the embedded forge offers under /api/v1 (what Gitea clients speak)."""
