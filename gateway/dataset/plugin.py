"""The last dataset build under ``$KSWARM_HOME/dataset``, served (what the UI's Dataset panel shows).

- ``GET /api/dataset``: the summary (counts, pass rates per task, pool and author, cost) and the newest
  accepted records;
- ``GET /api/dataset/records``: records, filtered (``task``, ``accepted``, ``author``, ``kernel``, ``pr``),
  newest first, with the fields the panel shows (author, reviewers, pool, timings, speedup, cost, lineage,
  links);
- ``GET /api/dataset/files/{name}``: the build's files (``records.*``, the splits ``accepted.*`` and
  ``rejected.*``, ``README.md``, ``summary.json``) for download;
- ``GET /api/dataset/withdrawals?repo=``: the kernels withdrawn from the repo's accepted split (read by
  ``kswarm dataset build``). Read-only: only the heal writes withdrawals (``WithdrawalStore``), and no
  route of this plugin writes anything.

The build itself is ``kswarm dataset build`` (or the demo); the gateway only reads its output."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse

from gateway.context import GatewayContext
from gateway.dataset.withdrawals import Withdrawal, WithdrawalStore
from gateway.deps import AnyPrincipal, Ctx
from gateway.errors import GatewayError, NotFound
from gateway.plugin import Contribution, NoSettings, Plugin

RECORD_FIELDS = ("record_id", "task", "author", "reviewers", "pool", "verdict", "commit", "pr")
PANEL_FIELDS = (
    "record_id", "task", "repo", "commit", "kernel_path", "kernel_sha256", "author", "author_model",
    "submitter", "reproduction", "reviewers", "approvers", "pr_number", "pr_title", "pr_state",
    "merge_commit", "accepted", "status", "withdrawal", "family", "on_main", "pool", "device",
    "device_name", "kind", "state", "verdict",
    "flags", "needs_review", "n_trials", "n_trials_passed", "timings", "speedup", "harness_s", "job_s",
    "submitted_at", "finished_at", "refines", "refines_commit", "cost_tokens", "cost_usd",
)  # fmt: skip
FILES = {
    "records.jsonl": ("data/records.jsonl", "application/x-ndjson"),
    "records.parquet": ("data/records.parquet", "application/vnd.apache.parquet"),
    "accepted.jsonl": ("data/accepted.jsonl", "application/x-ndjson"),
    "accepted.parquet": ("data/accepted.parquet", "application/vnd.apache.parquet"),
    "rejected.jsonl": ("data/rejected.jsonl", "application/x-ndjson"),
    "rejected.parquet": ("data/rejected.parquet", "application/vnd.apache.parquet"),
    "README.md": ("README.md", "text/markdown"),
    "summary.json": ("summary.json", "application/json"),
}
FileName = Literal[
    "records.jsonl", "records.parquet", "accepted.jsonl", "accepted.parquet", "rejected.jsonl",
    "rejected.parquet", "README.md", "summary.json",
]  # fmt: skip
REPO_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}/[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


def dataset_root(ctx: GatewayContext) -> Path:
    return ctx.settings.home / "dataset"


def read_summary(root: Path) -> dict[str, Any]:
    try:
        summary = json.loads((root / "summary.json").read_text())
    except FileNotFoundError:
        raise NotFound(f"no dataset built yet under {root}: run `kswarm dataset build`") from None
    except ValueError as exc:
        raise GatewayError(f"{root / 'summary.json'} is not JSON: {exc}", 500) from exc
    return dict(summary)


def read_rows(root: Path) -> list[dict[str, Any]]:
    jsonl = root / "data" / "records.jsonl"
    if not jsonl.exists():
        return []
    rows = []
    for line in jsonl.read_text().splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # a torn line of a build in progress: skipped, not a 500
    return rows


def read_dataset(root: Path, accepted: int) -> dict[str, Any]:
    summary = read_summary(root)
    records = [
        {k: row.get(k) for k in RECORD_FIELDS} | {"pr": row.get("pr_number")}
        for row in read_rows(root)
        if row.get("accepted")
    ]
    return {
        "summary": {k: v for k, v in summary.items() if not isinstance(v, dict)},
        "by_task": summary.get("by_task", {}),
        "pools": summary.get("pools", {}),
        "by_author": summary.get("by_author", {}),
        "cost": summary.get("cost"),
        "loop": summary.get("loop"),
        "accepted_records": records[-accepted:],
    }


def select_records(
    root: Path,
    task: str | None,
    accepted: bool | None,
    author: str | None,
    limit: int,
    kernel: str | None = None,
    pr: int | None = None,
    status: str | None = None,
) -> list[dict[str, Any]]:
    read_summary(root)  # 404 when nothing was built
    rows = [
        {k: row.get(k) for k in PANEL_FIELDS}
        for row in read_rows(root)
        if (task is None or row.get("task") == task)
        and (accepted is None or bool(row.get("accepted")) == accepted)
        and (author is None or row.get("author") == author)
        and (kernel is None or row.get("kernel_path") == kernel.strip("/"))
        and (pr is None or row.get("pr_number") == pr)
        and (status is None or row.get("status") == status)
    ]
    rows.sort(key=lambda r: r.get("submitted_at") or 0.0, reverse=True)
    return rows[:limit]


router = APIRouter(tags=["dataset"])


@router.get(
    "/api/dataset",
    summary="The last dataset build: summary, pass rates, cost, accepted records",
)
async def dataset(
    ctx: Ctx,
    _: AnyPrincipal,
    accepted: Annotated[int, Query(ge=1, le=1000, description="How many accepted records")] = 50,
) -> dict[str, Any]:
    return await asyncio.to_thread(read_dataset, dataset_root(ctx), accepted)


@router.get("/api/dataset/records", summary="Records of the last build, newest first")
async def records(
    ctx: Ctx,
    _: AnyPrincipal,
    task: Annotated[str | None, Query(max_length=64)] = None,
    accepted: Annotated[bool | None, Query(description="Only accepted (or only not accepted)")] = None,
    author: Annotated[str | None, Query(max_length=64)] = None,
    kernel: Annotated[
        str | None, Query(max_length=500, description="Only attempts at this kernel file (path).")
    ] = None,
    pr: Annotated[int | None, Query(ge=1, description="Only attempts of this PR.")] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
    status: Annotated[
        Literal["accepted", "withdrawn", "rejected", "other"] | None,
        Query(description="Only records of this status."),
    ] = None,
) -> list[dict[str, Any]]:
    return await asyncio.to_thread(
        select_records, dataset_root(ctx), task, accepted, author, limit, kernel, pr, status
    )


@router.get(
    "/api/dataset/files/{name}",
    summary="A file of the last build (JSONL, Parquet, the card, the summary)",
    response_class=FileResponse,
)
async def files(name: FileName, ctx: Ctx, _: AnyPrincipal) -> FileResponse:
    root = dataset_root(ctx)
    relative, media = FILES[name]
    path = root / relative
    if not path.is_file():
        raise NotFound(f"no {name} built yet under {root}: run `kswarm dataset build`")
    return FileResponse(path, media_type=media, filename=name)


@router.get(
    "/api/dataset/withdrawals",
    summary="Kernels withdrawn from a repo's accepted split (by confirmed counterexamples)",
)
async def withdrawals(
    ctx: Ctx,
    _: AnyPrincipal,
    repo: Annotated[str, Query(pattern=REPO_PATTERN, description="org/name of the dataset repo.")],
) -> list[Withdrawal]:
    return await WithdrawalStore(ctx.redis).all(repo)


class DatasetPlugin(Plugin[NoSettings]):
    """``dataset``: reads the build under ``$KSWARM_HOME/dataset``; provides and needs no service."""

    name = "dataset"
    settings_model = NoSettings

    def contribute(self, ctx: GatewayContext) -> Contribution:
        return Contribution(routers=[router])
