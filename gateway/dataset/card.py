"""The dataset card (``README.md`` with Hugging Face front matter) and its numbers."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from gateway.dataset.card_loop import FRONT_MATTER_CONFIGS, numbers_section, splits_section
from gateway.dataset.markdown import md_code, md_text
from gateway.dataset.schema import COLUMNS, SCHEMA_VERSION, type_name
from gateway.forge.gate.evidence import EVIDENCE_LEVELS, evidence_rank


def _rate(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def cost_summary(
    rows: list[dict[str, Any]], report: Mapping[str, Any] | None, models: Mapping[str, str] | None
) -> dict[str, Any] | None:
    """What the kernels cost (the monitor's ledger: usage booked to the task its agent held): totals per
    task, agent and model, and tokens and USD per accepted kernel; None without a monitor."""
    if report is None:
        return None
    accepted = Counter(r["task"] for r in rows if r["accepted"])
    models = dict(models or {})
    by_task: dict[str, dict[str, Any]] = {}  # also per accepted kernel below (None: none accepted)
    by_agent: dict[str, dict[str, float]] = {}
    by_model: dict[str, dict[str, float]] = {}
    for line in report.get("lines") or []:
        task, agent = str(line.get("task")), str(line.get("agent"))
        model = models.get(agent) or line.get("model") or "?"
        for table, key in ((by_task, task), (by_agent, agent), (by_model, model)):
            entry = table.setdefault(key, {"tokens": 0.0, "cost_usd": 0.0})
            entry["tokens"] += float(line.get("tokens") or 0)
            entry["cost_usd"] += float(line.get("cost_usd") or 0.0)
    for task, totals in by_task.items():
        n = accepted.get(task, 0)
        totals["accepted"] = n
        totals["usd_per_accepted"] = round(totals["cost_usd"] / n, 6) if n else None
        totals["tokens_per_accepted"] = round(totals["tokens"] / n) if n else None
    attributed = sum(e["cost_usd"] for t, e in by_task.items() if t != "-")
    tokens = sum(e["tokens"] for t, e in by_task.items() if t != "-")
    n_accepted = sum(accepted.values())
    return {
        "total_usd": round(sum(e["cost_usd"] for e in by_task.values()), 6),
        "total_tokens": int(sum(e["tokens"] for e in by_task.values())),
        "attributed_usd": round(attributed, 6),
        "attributed_tokens": int(tokens),
        "accepted": n_accepted,
        "usd_per_accepted": round(attributed / n_accepted, 6) if n_accepted else None,
        "tokens_per_accepted": round(tokens / n_accepted) if n_accepted else None,
        "by_task": dict(sorted(by_task.items())),
        "by_agent": dict(sorted(by_agent.items())),
        "by_model": dict(sorted(by_model.items())),
    }


def evidence_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per accepted kernel (task, path, merged commit) the strongest level among its accepted records
    (the author's job and a reviewer's reproduction may differ), the count per level over those
    kernels, and over every record."""
    best: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in rows:
        if not row["accepted"]:
            continue
        key = (row["task"], row["kernel_path"], row["commit"])
        current = best.get(key)
        if current is None or evidence_rank(row["evidence"]) > evidence_rank(current["evidence"]):
            best[key] = {
                "task": row["task"],
                "kernel_path": row["kernel_path"],
                "commit": row["commit"],
                "author": row["author"],
                "evidence": row["evidence"],
            }
    kernels = [best[k] for k in sorted(best)]
    counts = Counter(str(k["evidence"]) for k in kernels)
    return {
        "kernels": kernels,
        "accepted": {level: counts[level] for level in reversed(EVIDENCE_LEVELS) if counts[level]},
        "records": dict(Counter(str(r["evidence"]) for r in rows).most_common()),
    }


def evidence_line(evidence: Mapping[str, Any]) -> str:
    """``N device-verified, M cpu-screened`` (and any weaker level present) over the accepted kernels."""
    counts = evidence.get("accepted") or {}
    always = ("device-verified", "cpu-screened")
    shown = [*always, *(lvl for lvl in reversed(EVIDENCE_LEVELS) if counts.get(lvl) and lvl not in always)]
    return ", ".join(f"{counts.get(lvl, 0)} {lvl}" for lvl in shown)


def summarize(
    rows: list[dict[str, Any]],
    repo: str,
    cost: Mapping[str, Any] | None = None,
    models: Mapping[str, str] | None = None,
    loop: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Counts, pools, pass rates, cost, the splits' numbers (``loop``: ``numbers.loop_numbers``): what
    the card shows and ``summary.json`` holds."""
    by_pool: dict[str, Counter[str]] = {}
    by_task: dict[str, Counter[str]] = {}
    by_author: dict[str, Counter[str]] = {}
    for row in rows:
        for tally, key in ((by_pool, row["pool"]), (by_task, row["task"]), (by_author, row["author"] or "?")):
            c = tally.setdefault(key, Counter())
            c["records"] += 1
            c["passed"] += bool(row["passed"])
            c["accepted"] += bool(row["accepted"])

    def table(counts: dict[str, Counter[str]]) -> dict[str, dict[str, Any]]:
        return {
            k: {
                "records": c["records"],
                "passed": c["passed"],
                "accepted": c["accepted"],
                "pass_rate": _rate(c["passed"], c["records"]),
            }
            for k, c in sorted(counts.items())
        }

    verdicts = Counter(str(r["verdict"]) for r in rows)
    flags = Counter(f for r in rows for f in r["flags"])
    return {
        "repo": repo,
        "schema_version": SCHEMA_VERSION,
        "built_at": time.time(),
        "records": len(rows),
        "accepted": sum(bool(r["accepted"]) for r in rows),
        "statuses": dict(sorted(Counter(str(r.get("status")) for r in rows).items())),
        "passed": sum(bool(r["passed"]) for r in rows),
        "pass_rate": _rate(sum(bool(r["passed"]) for r in rows), len(rows)),
        "tasks": len(by_task),
        "tasks_with_accepted": sum(1 for c in by_task.values() if c["accepted"]),
        "authors": sorted(a for a in by_author if a != "?"),
        "pools": table(by_pool),
        "by_task": table(by_task),
        "by_author": table(by_author),
        "verdicts": dict(sorted(verdicts.items())),
        "flags": dict(flags.most_common()),
        "evidence": evidence_summary(rows),
        "cost": cost_summary(rows, cost, models),
        "loop": dict(loop) if loop is not None else None,
    }


def _md_table(header: list[str], rows: list[list[Any]]) -> str:
    """A table of the card's own header and cells already escaped (``md_text``/``md_code``) or numbers."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def _counts_table(title: str, counts: dict[str, dict[str, Any]]) -> str:
    rows = [
        [md_text(k), c["records"], c["passed"], c["accepted"], f"{c['pass_rate']:.0%}"]
        for k, c in counts.items()
    ]
    return _md_table([title, "records", "passed", "accepted", "pass rate"], rows)


def _cost_section(cost: Mapping[str, Any] | None) -> str:
    if not cost:
        return "No cost data: the gateway had no monitor to attribute LLM usage to tasks.\n"

    def money(x: Any) -> str:
        return f"${x:.4f}" if isinstance(x, int | float) else "–"

    tasks = _md_table(
        ["task", "tokens", "USD", "accepted", "USD per accepted kernel"],
        [
            [
                md_text(t),
                int(e["tokens"]),
                money(e["cost_usd"]),
                e["accepted"],
                money(e.get("usd_per_accepted")),
            ]
            for t, e in cost["by_task"].items()
        ],
    )
    agents = _md_table(
        ["agent", "tokens", "USD"],
        [[md_text(a), int(e["tokens"]), money(e["cost_usd"])] for a, e in cost["by_agent"].items()],
    )
    models = _md_table(
        ["model", "tokens", "USD"],
        [[md_text(m), int(e["tokens"]), money(e["cost_usd"])] for m, e in cost["by_model"].items()],
    )
    return f"""LLM usage booked to the task each agent held a claim on while spending it (task `-`: usage
while holding none). Swarm: {cost["total_tokens"]} tokens, {money(cost["total_usd"])}; on tasks
{money(cost["attributed_usd"])}; **{money(cost["usd_per_accepted"])} and {cost["tokens_per_accepted"] or "–"}
tokens per accepted kernel** ({cost["accepted"]} accepted). Each row's `cost_tokens`/`cost_usd` is what its
author spent on its task since their previous attempt at it.

{tasks}

{agents}

{models}
"""


def _evidence_table(evidence: Mapping[str, Any]) -> str:
    kernels = evidence.get("kernels") or []
    if not kernels:
        return "No accepted kernels yet."
    rows = [
        [
            md_text(k["task"]),
            md_code(k["kernel_path"]),
            md_text(str(k["commit"])[:10]),
            md_text(k["author"] or "?"),
            md_code(k["evidence"]),
        ]
        for k in kernels
    ]
    return _md_table(["task", "kernel", "commit", "author", "evidence"], rows)


def render_card(s: dict[str, Any]) -> str:
    built = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(s["built_at"]))
    schema = _md_table(
        ["column", "type", "meaning"], [[f"`{c.name}`", type_name(c.type), c.doc] for c in COLUMNS]
    )
    verdicts = ", ".join(f"{md_text(k)} {v}" for k, v in s["verdicts"].items()) or "none"
    flags = ", ".join(f"{md_code(k)} {v}" for k, v in s["flags"].items()) or "none"
    authors = ", ".join(md_text(a) for a in s["authors"]) or "none"
    statuses = ", ".join(f"{md_text(k)} {v}" for k, v in (s.get("statuses") or {}).items()) or "none"
    return f"""---
{FRONT_MATTER_CONFIGS}
tags:
- triton
- kernels
- code
---

# kswarm kernel dataset: {md_code(s["repo"])}

Every verification attempt of a Triton kernel submitted to the swarm's dataset repo, one row per
attempt, with the kernel's source, its author (the commit author, enforced by the forge), the PR and
its reviewers, the harness's per-trial results, flags, timings where measured, and lineage.
`accepted` rows are the kernels the review gate merged into `main` and that passed verification at
exactly that commit, and that no confirmed counterexample has broken since (those are `withdrawn`);
`rejected` rows failed the gate and are data too.
Built {built} by `kswarm dataset build`; schema version {s["schema_version"]}.

## Counts

- records (verification attempts): **{s["records"]}**, accepted **{s["accepted"]}**
- by status: {statuses}
- passed: {s["passed"]} ({s["pass_rate"]:.0%})
- tasks with attempts: {s["tasks"]}; with an accepted kernel: {s["tasks_with_accepted"]}
- authors: {authors}
- verdicts: {verdicts}
- flags: {flags}
- evidence of the accepted kernels: **{evidence_line(s["evidence"])}**

## Splits

{splits_section()}
## Per task: accepted, withdrawn, rejected, counterexamples, cost

{numbers_section(s.get("loop"))}
## Evidence

What each accepted kernel's verification proves (the `evidence` column; the strongest level among its
accepted records): `device-verified` a device pool ran every trial on real hardware and passed;
`cpu-screened` Triton's CPU interpreter passed, with the task's device shapes sampled; `cpu-shapes-only`
the interpreter passed on the small CPU shapes only. Levels are derived by the gateway from the pool that
ran the job and its verdict, never taken from the harness record's own claim.

{_evidence_table(s["evidence"])}

### Pools

{_counts_table("pool", s["pools"])}

### Tasks

{_counts_table("task", s["by_task"])}

### Authors

{_counts_table("author", s["by_author"])}

## Cost

{_cost_section(s.get("cost"))}
## Loading

```python
import datasets

ds = datasets.load_dataset("path/to/this/dataset")  # splits: train (every record), accepted, rejected
rejected = ds["rejected"]
hacks = rejected.filter(lambda r: r["family"] == "reward_hack")
```

Each split's rows are also in `data/<split>.jsonl` (`data/records.jsonl` for `train`), one JSON object
per line.

## Schema

{schema}

Nested values: `trials[].shape` and `timings[].shape` are JSON objects as strings (shapes differ per
task). A row's `reviewers` never include its `author`: the forge refuses self-review.

## Caveats

- Correctness is what the harness checked: the task's sampled shapes, dtypes and seeds. A `cpu` pool
  pass is a screen through Triton's interpreter, not a device result: filter on `evidence ==
  "device-verified"` for kernels a device ran.
- `speedup` is measured only on device pools by `bench` jobs; above 10x it is flagged for review.
"""
