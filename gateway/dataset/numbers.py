"""The card's numbers of issue 27 (point 6), per task and overall: accepted and withdrawn kernels,
rejected records by family, counterexamples confirmed and refused, what each regression case withdrew,
and the cost per accepted kernel with the rejected attempts and the red team's work included."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from gateway.dataset.families import FAMILY_ORDER
from gateway.dataset.loop_sources import CounterexampleRecord
from gateway.dataset.withdrawals import Withdrawal

RED_TEAM_ROLE = "red-team"
NO_TASK = "-"  # the monitor's task of usage while holding none


def red_team(roles: Mapping[str, str], counterexamples: Iterable[CounterexampleRecord]) -> set[str]:
    """The red team: the spec's ``role: red-team`` agents, and whoever submitted a counterexample."""
    return {a for a, role in roles.items() if role == RED_TEAM_ROLE} | {c.finder for c in counterexamples}


def _kernels(rows: list[dict[str, Any]], status: str) -> set[tuple[str, str, str]]:
    return {(r["task"], r["kernel_path"], r["commit"]) for r in rows if r["status"] == status}


def _cost(
    rows: list[dict[str, Any]],
    report: Mapping[str, Any] | None,
    team: set[str],
    cxs: list[CounterexampleRecord],
) -> dict[str, dict[str, float]] | None:
    """Per task (and ``*`` overall) in USD: ``all_in`` (everything booked to the task, plus the red
    team's spend while holding no task shared over the tasks it attacked, by its counterexamples),
    ``rejected`` (the rejected records' own cost) and ``red_team`` (the red team's share)."""
    if report is None:
        return None
    out: dict[str, dict[str, float]] = {}

    def add(task: str, field: str, usd: float) -> None:
        entry = out.setdefault(task, {"all_in": 0.0, "rejected": 0.0, "red_team": 0.0})
        entry[field] += usd

    attacked: dict[str, Counter[str]] = {}
    for c in cxs:
        attacked.setdefault(c.finder, Counter())[c.task] += 1
    for line in report.get("lines") or []:
        task, agent, usd = str(line.get("task")), str(line.get("agent")), float(line.get("cost_usd") or 0.0)
        if task != NO_TASK:
            add(task, "all_in", usd)
            add("*", "all_in", usd)
            if agent in team:
                add(task, "red_team", usd)
                add("*", "red_team", usd)
        elif agent in team:  # the red team's hunting: no claim is held while attacking merged kernels
            add("*", "all_in", usd)
            add("*", "red_team", usd)
            targets = attacked.get(agent) or Counter()
            for target, n in targets.items():
                share = usd * n / sum(targets.values())
                add(target, "all_in", share)
                add(target, "red_team", share)
    for row in rows:
        if row["status"] == "rejected" and row["cost_usd"]:
            add(row["task"], "rejected", row["cost_usd"])
            add("*", "rejected", row["cost_usd"])
    return {t: {k: round(v, 6) for k, v in e.items()} for t, e in out.items()}


def loop_numbers(
    rows: list[dict[str, Any]],
    withdrawals: list[Withdrawal],
    counterexamples: list[CounterexampleRecord] | None,
    cost_report: Mapping[str, Any] | None,
    roles: Mapping[str, str],
) -> dict[str, Any]:
    """``summary.json``'s ``loop``: ``by_task`` and ``overall`` rows, ``regression_cases``."""
    cxs = list(counterexamples or [])
    accepted, withdrawn = _kernels(rows, "accepted"), _kernels(rows, "withdrawn")
    rejected = [r for r in rows if r["status"] == "rejected"]
    cost = _cost(rows, cost_report, red_team(roles, cxs), cxs)
    tasks = sorted({r["task"] for r in rows} | {c.task for c in cxs} | {w.task for w in withdrawals})

    def numbers(task: str | None) -> dict[str, Any]:
        def mine(t: str) -> bool:
            return task is None or t == task

        families = Counter(str(r["family"]) for r in rejected if mine(r["task"]))
        cx_status = Counter(c.status for c in cxs if mine(c.task))
        n_accepted = sum(1 for k in accepted if mine(k[0]))
        zero = {"all_in": 0.0, "rejected": 0.0, "red_team": 0.0}
        spent = None if cost is None else cost.get(task or "*", zero)
        all_in = spent["all_in"] if spent else None
        per_kernel = round(all_in / n_accepted, 6) if all_in is not None and n_accepted else None
        return {
            "accepted": n_accepted,
            "withdrawn": sum(1 for k in withdrawn if mine(k[0])),
            "rejected": sum(families.values()),
            "rejected_by_family": {f: families[f] for f in FAMILY_ORDER if families[f]},
            "counterexamples": None
            if counterexamples is None
            else {s: cx_status[s] for s in ("confirmed", "refused", "pending", "error")},
            "cost_usd": all_in,
            "rejected_usd": spent["rejected"] if spent else None,
            "red_team_usd": spent["red_team"] if spent else None,
            "usd_per_accepted_kernel": per_kernel,
        }

    finders = {c.id: c.finder for c in cxs}
    cases: dict[str, dict[str, Any]] = {
        c.id: {"counterexample": c.id, "task": c.task, "finder": c.finder, "withdrew": 0, "kernels": []}
        for c in cxs
        if c.status == "confirmed"
    }
    for w in withdrawals:
        case = cases.setdefault(
            w.counterexample,
            {"counterexample": w.counterexample, "task": w.task, "finder": finders.get(w.counterexample),
             "withdrew": 0, "kernels": []},
        )  # fmt: skip
        case["withdrew"] += 1
        case["kernels"].append({"kernel_path": w.kernel, "commit": w.sha, "author": w.author, "job": w.job})
    return {
        "by_task": {t: numbers(t) for t in tasks},
        "overall": numbers(None),
        "regression_cases": [cases[k] for k in sorted(cases, key=lambda k: (cases[k]["task"], k))],
        "counterexamples_known": counterexamples is not None,
        "cost_known": cost is not None,
    }
