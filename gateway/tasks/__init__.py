"""The task board: tasks posted by operators and leads, claimed by agents under leases (docs/tasks.md)."""
