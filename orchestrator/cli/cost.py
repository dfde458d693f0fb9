"""``kswarm cost``: what the swarm's LLM usage cost, per agent and task, and what one kernel cost.

``cost`` is the command (``main`` names it); it reads the gateway through its client only:

- ``GET /api/monitor/cost`` (operators): the monitor's ledger, each model call the LLM proxy booked
  attributed to the tasks its agent held a claim on; ``--agent``/``--task`` keep those lines;
- ``--kernel PATH`` / ``--pr N``: the last dataset build's records of that kernel file or PR
  (``GET /api/dataset/records``): each record's cost is what its author spent on its task while holding
  the claim, from its previous attempt to this one (the build computes it; ``gateway/dataset/build.py``).

Every answer says whether it is an estimate: a model without a price of its own in the proxy's table
(``scripted``, an unknown or local model) is priced at the table's ``default`` rate, and the answer then
carries ``estimate: true`` and the rates used (``{model: {input_per_mtok, output_per_mtok}}``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated, Any

import typer
from rich.table import Table

from gateway.client import BadInput, GatewayClient, Missing
from orchestrator.cli.commands import HomeOpt, JsonOpt, connect
from orchestrator.cli.output import console, print_json, safe

UNATTRIBUTED = "-"


def totals(lines: list[dict[str, Any]], key: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"tokens": 0.0, "cost_usd": 0.0})
    for line in lines:
        row = out[str(line.get(key) or "?")]
        row["tokens"] += float(line.get("tokens") or 0)
        row["cost_usd"] += float(line.get("cost_usd") or 0.0)
    return dict(sorted(out.items()))


def ledger_answer(report: dict[str, Any], agent: str | None, task: str | None) -> dict[str, Any]:
    """The ledger's lines of ``agent`` and ``task`` (all when None), their totals per agent and task,
    and the rates used by the estimated ones."""
    lines = [
        x
        for x in report.get("lines") or []
        if (agent is None or x.get("agent") == agent) and (task is None or x.get("task") == task)
    ]
    prices = report.get("prices") or {}
    used = {str(x.get("model") or "unknown") for x in lines if x.get("estimate")}
    return {
        "lines": lines,
        "by_agent": totals(lines, "agent"),
        "by_task": totals(lines, "task"),
        "total": {
            "tokens": sum(int(x.get("tokens") or 0) for x in lines),
            "cost_usd": sum(float(x.get("cost_usd") or 0.0) for x in lines),
        },
        "estimate": bool(used),
        "prices": {m: prices[m] for m in sorted(used) if m in prices},
        "note": report.get("note", ""),
    }


def kernel_answer(
    gateway: GatewayClient, kernel: str | None, pr: int | None, agent: str | None, task: str | None
) -> dict[str, Any]:
    """The dataset records of ``kernel`` (or ``pr``) with their cost, each labelled from the ledger's line
    of its author on its task (the same model booking the build's window was priced by)."""
    try:
        records = gateway.get(
            "/api/dataset/records", kernel=kernel, pr=pr, author=agent, task=task, limit=5000
        )
    except Missing as exc:  # no build yet, or no dataset plugin in this gateway (a bare "Not Found")
        reason = (
            exc.detail if exc.detail != "Not Found" else "this gateway serves no dataset (no dataset plugin)"
        )
        raise Missing(exc.status, f"{reason}; a kernel's cost comes from the dataset build") from None
    if not records:
        what = f"kernel {kernel}" if kernel else f"PR #{pr}"
        raise Missing(
            0, f"no dataset record of {what} in the last build (`kswarm dataset build` adds new ones)"
        )
    try:
        report = gateway.get("/api/monitor/cost")
    except Missing:
        report = {}
    lines = {(x.get("task"), x.get("agent")): x for x in report.get("lines") or []}
    prices = report.get("prices") or {}
    out: list[dict[str, Any]] = []
    used: set[str] = set()
    for r in records:
        line = lines.get((r.get("task"), r.get("author"))) or {}
        estimate = bool(line.get("estimate"))
        if estimate:
            used.add(str(line.get("model") or "unknown"))
        out.append(
            {
                k: r.get(k)
                for k in ("record_id", "task", "kernel_path", "author", "commit", "pr_number", "verdict")
            }
            | {
                "accepted": bool(r.get("accepted")),
                "submitted_at": r.get("submitted_at"),
                "cost_tokens": r.get("cost_tokens"),
                "cost_usd": r.get("cost_usd"),
                "estimate": estimate,
            }
        )
    return {
        "kernel": kernel,
        "pr": pr,
        "records": out,
        "total": {
            "tokens": sum(int(r["cost_tokens"] or 0) for r in out),
            "cost_usd": sum(float(r["cost_usd"] or 0.0) for r in out),
        },
        "estimate": bool(used),
        "prices": {m: prices[m] for m in sorted(used) if m in prices},
        "note": "each attempt's cost is what its author spent on its task while holding the claim, since "
        "its previous attempt (as of the last dataset build)",
    }


def money(value: Any, estimate: bool = False) -> str:
    if value is None:
        return "–"
    return f"${float(value):.4f}" + (" (estimate)" if estimate else "")


def print_prices(answer: dict[str, Any]) -> None:
    if not answer["estimate"]:
        return
    rates = "; ".join(
        f"{safe(m)}: ${r['input_per_mtok']} in / ${r['output_per_mtok']} out per MTok"
        for m, r in answer["prices"].items()
    )
    console.print(f"estimate: no price of the model's own, priced at the table's rate ({rates})")


def print_ledger(answer: dict[str, Any]) -> None:
    table = Table("task", "agent", "model", "tokens", "cost")
    for x in answer["lines"]:
        task = x["task"] if x["task"] != UNATTRIBUTED else "- (no task held)"
        table.add_row(
            safe(task), safe(x["agent"]), safe(x.get("model") or "?"), f"{int(x['tokens']):,}",
            money(x["cost_usd"], bool(x.get("estimate"))),
        )  # fmt: skip
    console.print(table)
    total = answer["total"]
    console.print(f"total: {total['tokens']:,} tokens, {money(total['cost_usd'], answer['estimate'])}")
    print_prices(answer)


def print_kernel(answer: dict[str, Any]) -> None:
    table = Table("record", "task", "kernel", "author", "commit", "PR", "verdict", "tokens", "cost")
    for r in answer["records"]:
        table.add_row(
            safe(r["record_id"]), safe(r["task"]), safe(r["kernel_path"]), safe(r["author"]),
            safe(str(r["commit"] or "")[:10]), f"#{r['pr_number']}" if r["pr_number"] else "",
            safe(r["verdict"]) + (" (accepted)" if r["accepted"] else ""),
            f"{int(r['cost_tokens'] or 0):,}", money(r["cost_usd"], r["estimate"]),
        )  # fmt: skip
    console.print(table)
    total = answer["total"]
    console.print(
        f"total: {total['tokens']:,} tokens, {money(total['cost_usd'], answer['estimate'])} "
        f"over {len(answer['records'])} attempt(s)"
    )
    print_prices(answer)


def cost(
    agent: Annotated[str | None, typer.Option("--agent", "-a", help="Only this agent.")] = None,
    task: Annotated[str | None, typer.Option("--task", "-t", help="Only this task ('-': none).")] = None,
    kernel: Annotated[
        str | None, typer.Option("--kernel", "-k", help="What this kernel file (repo path) cost.")
    ] = None,
    pr: Annotated[int | None, typer.Option("--pr", help="What the kernel of this PR cost.")] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What the LLM usage cost: per task and agent, or one kernel's (--kernel PATH or --pr N)."""
    if kernel is not None and pr is not None:
        raise BadInput(0, "give --kernel or --pr, not both")
    if pr is not None and pr < 1:
        raise BadInput(0, f"--pr is a PR number (1 or more), not {pr}")
    with connect(home) as gateway:
        if kernel is not None or pr is not None:
            answer = kernel_answer(gateway, kernel, pr, agent, task)
        else:
            answer = ledger_answer(gateway.get("/api/monitor/cost"), agent, task)
    if as_json:
        print_json(answer, indent=1)
    elif "records" in answer:
        print_kernel(answer)
    else:
        print_ledger(answer)
