"""The embedded forge: bare repositories and Redis, the receive path (git's hooks), git's smart HTTP."""
