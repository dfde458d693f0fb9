"""The kernel dataset: verification attempts joined with commits, PRs and reviews (docs/dataset.md)."""
