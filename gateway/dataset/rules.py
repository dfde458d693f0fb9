"""The swarm's rules for its dataset (the swarm spec's ``dataset:`` section): models only, so reading a
spec imports neither pyarrow nor Redis. ``kswarm dataset build`` applies them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

TIMELINE_EXCERPT_BYTES = 32_768


class DatasetRules(BaseModel):
    """What the build publishes beyond the verification records (the spec's ``dataset:``)."""

    model_config = ConfigDict(extra="forbid")

    rejected_timelines: bool = Field(
        True,
        description="Publish, with each rejected record, the excerpt of its author's timeline that "
        "produced it (the wakes, model calls and tool calls since the author's previous attempt); "
        "false: the rejected split carries no timeline (the column is null).",
    )
    timeline_excerpt_bytes: int = Field(
        TIMELINE_EXCERPT_BYTES,
        ge=1_024,
        le=262_144,
        description="The most bytes (as JSON) of one record's timeline excerpt: the newest entries before "
        "the submission are kept, older ones dropped (timeline_truncated says so).",
    )
