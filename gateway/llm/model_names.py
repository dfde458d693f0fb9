"""The model names the gateway records: only what the upstream answered, and only a sane name.

An agent chooses the ``model`` of its request and could put anything there; what it used is what the
upstream says in its answer (the ``model`` of a Messages answer, of a stream's ``message_start``). That
name is booked per agent (``ks:llm:models:<agent>``) and is where the cost report and the dataset take
an agent's model from. A name outside ``MODEL_NAME_RE`` (markup, a newline, over 100 characters) is
booked as ``unknown``: it is shown in the UI, the cost report and the dataset card (docs/security.md).
"""

from __future__ import annotations

import re

MODEL_NAME_RE = re.compile(r"[A-Za-z0-9._:@/-]{1,100}")
UNKNOWN_MODEL = "unknown"


def valid_model(value: object) -> str | None:
    """``value`` when it is a sane model name, else None."""
    return value if isinstance(value, str) and MODEL_NAME_RE.fullmatch(value) else None


def booked_model(value: object) -> str:
    """The name to record for an upstream's ``model``: itself when sane, else ``unknown``."""
    return valid_model(value) or UNKNOWN_MODEL
