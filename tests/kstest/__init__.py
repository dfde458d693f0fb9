"""Shared test support: real Redis, real gateway processes, real clients."""
