"""The forge: git hosting with per-agent identities, pull requests and the review gate.

Kept import-free on purpose: ``receive.py`` runs as a git hook with a bare interpreter.
"""
