"""The knowledge base: a reviewed repo in the forge, searched at its protected branch (docs/kb.md)."""
