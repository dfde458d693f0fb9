"""The Dataset panel: per task, its accepted kernels (author, reviewers, pool, timings, speedup, what it
cost, links to the kernel at its commit and to its job), pass rates per task and pool, each accepted
kernel's lineage (the attempts it refines), and the build's files to download."""

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import FileResponse, HTMLResponse

from gateway.dataset.plugin import FILES, dataset_root
from gateway.errors import NotFound
from gateway.ui.deps import UiDep, UiSvc
from gateway.ui.internal import has_route

DATASET_ROUTE = "/api/dataset"


def lineage(
    record: dict[str, Any], by_id: dict[str, dict[str, Any]], limit: int = 20
) -> list[dict[str, Any]]:
    """The attempts ``record`` refines, newest first (``refines`` links, as the build computed them)."""
    chain: list[dict[str, Any]] = []
    seen = {record["record_id"]}
    current = by_id.get(str(record.get("refines") or ""))
    while current is not None and current["record_id"] not in seen and len(chain) < limit:
        chain.append(current)
        seen.add(current["record_id"])
        current = by_id.get(str(current.get("refines") or ""))
    return chain


router = APIRouter(prefix="/ui")


@router.get("/dataset", response_class=HTMLResponse, summary="Dataset: accepted kernels per task")
async def dataset(ui: UiSvc, request: Request, user: UiDep) -> HTMLResponse:
    api = ui.api(user)
    available = has_route(request.app, DATASET_ROUTE)
    data: dict[str, Any] = {}
    records: list[dict[str, Any]] = []
    error = ""
    if available:
        reply = await api.get(DATASET_ROUTE, accepted=1)
        if reply.ok:
            data = reply.json()
            got = await api.get("/api/dataset/records", limit=5000)
            records = got.json() if got.ok else []
        else:
            error = reply.detail
    by_id = {r["record_id"]: r for r in records}
    tasks: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("accepted"):
            tasks.setdefault(str(r["task"]), []).append(r | {"lineage": lineage(r, by_id)})
    live_cost = None
    if has_route(request.app, "/api/monitor/cost"):
        got = await api.get("/api/monitor/cost")
        live_cost = got.json() if got.ok else None
    return ui.page(
        "dataset.html",
        request,
        user,
        "dataset",
        available=available,
        error=error,
        data=data,
        summary=data.get("summary", {}),
        by_task=data.get("by_task", {}),
        pools=data.get("pools", {}),
        cost=data.get("cost"),
        live_cost=live_cost,
        tasks=dict(sorted(tasks.items())),
        files=list(FILES),
        n_records=len(records),
    )


@router.get("/dataset/files/{name}", summary="Download a file of the last dataset build")
async def download(
    ui: UiSvc, name: Annotated[str, Path(pattern=r"^[A-Za-z0-9_.-]{1,40}$")], user: UiDep
) -> FileResponse:
    if name not in FILES:
        raise NotFound(f"no dataset file {name!r}: {', '.join(FILES)}")
    relative, media = FILES[name]
    path = dataset_root(ui.ctx) / relative
    if not path.is_file():
        raise NotFound(f"no {name} built yet: run `kswarm dataset build`")
    return FileResponse(path, media_type=media, filename=name)
