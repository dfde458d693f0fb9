"""Monitoring a swarm: what needs a human now, what each agent did, history over time, and the
operator's actions.

- ``attention``: everything that needs a human, computed from the other components' public state;
- ``timeline``: each agent's wakes, model calls and tool calls, reported by the agent itself;
- ``series``: per-minute history in Redis with a bounded retention (charts, JSON);
- ``feeder``: the one loop (a lease: one gateway replica at a time) that turns the event stream and
  periodic samples into series, claim windows and cost attributed to tasks;
- ``cost``: what a kernel cost: LLM usage attributed to the task its agent held while spending it;
- ``actions``: the operator's actions (reviews, comments, job cancel/requeue, tasks), audited;
- ``charts``: server-rendered SVG;
- ``routes`` and ``plugin``: REST under ``/api/attention``, ``/api/agents/{name}/timeline``,
  ``/api/timeline``, ``/api/monitor`` and ``/api/actions``.

See docs/ui.md. The plugin reads the forge, the job runner, the task board and the LLM proxy through
their services, each optional: a part of the monitor whose source is missing says so.
"""
