"""``GET /api/dataset``: the last dataset build under ``$KSWARM_HOME/dataset`` (what the UI's Dataset
panel shows): its summary (counts, pass rates per task and pool) and the newest accepted records.

The build itself is ``kswarm dataset build`` (or the demo); the gateway only reads its output."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query

from gateway.context import GatewayContext
from gateway.deps import AnyPrincipal
from gateway.errors import GatewayError, NotFound
from gateway.mcp_server import GatewayMCP
from gateway.plugin import NoSettings, Plugin

RECORD_FIELDS = ("record_id", "task", "author", "reviewers", "pool", "verdict", "commit", "pr")


def read_dataset(root: Path, accepted: int) -> dict[str, Any]:
    try:
        summary = json.loads((root / "summary.json").read_text())
    except FileNotFoundError:
        raise NotFound(f"no dataset built yet under {root}: run `kswarm dataset build`") from None
    except ValueError as exc:
        raise GatewayError(f"{root / 'summary.json'} is not JSON: {exc}", 500) from exc
    records: list[dict[str, Any]] = []
    jsonl = root / "data" / "records.jsonl"
    if jsonl.exists():
        for line in jsonl.read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            if row.get("accepted"):
                records.append({k: row.get(k) for k in RECORD_FIELDS})
    return {
        "summary": {k: v for k, v in summary.items() if not isinstance(v, dict)},
        "by_task": summary.get("by_task", {}),
        "pools": summary.get("pools", {}),
        "accepted_records": records[-accepted:],
    }


class DatasetPlugin(Plugin[NoSettings]):
    """``dataset``: reads the build under ``$KSWARM_HOME/dataset``; provides and needs no service."""

    name = "dataset"
    settings_model = NoSettings

    def install(self, app: FastAPI, ctx: GatewayContext, mcp: GatewayMCP) -> None:
        root = ctx.settings.home / "dataset"

        @app.get("/api/dataset", summary="The last dataset build: summary, pass rates, accepted records")
        async def dataset(
            _: AnyPrincipal,
            accepted: Annotated[int, Query(ge=1, le=1000, description="How many accepted records")] = 50,
        ) -> dict[str, Any]:
            return await asyncio.to_thread(read_dataset, root, accepted)
