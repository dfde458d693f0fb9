"""A minimal SSE reader for tests (id, event, data), over httpx streaming."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class Event:
    id: str
    event: str
    data: dict[str, Any]


async def read_events(response: httpx.Response) -> AsyncIterator[Event]:
    event_id, name, data = "", "message", []
    async for line in response.aiter_lines():
        if line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif line == "":
            if data:
                yield Event(event_id, name, json.loads("\n".join(data)))
            event_id, name, data = "", "message", []
