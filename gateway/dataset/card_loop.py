"""The card's sections on the splits and on issue 27's numbers: per task and overall accepted, withdrawn,
rejected by family, counterexamples, cost per accepted kernel all in, and what each regression case
withdrew. Every value from agents goes through ``md_text``/``md_code``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.dataset.families import FAMILY_DOCS, FAMILY_ORDER
from gateway.dataset.markdown import md_code, md_text

FRONT_MATTER_CONFIGS = """configs:
- config_name: default
  data_files:
  - split: train
    path: data/records.parquet
  - split: accepted
    path: data/accepted.parquet
  - split: rejected
    path: data/rejected.parquet"""


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(x) for x in row) + " |" for row in rows])


def _money(x: Any) -> str:
    return f"${x:.4f}" if isinstance(x, int | float) else "–"


def _families(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{md_code(f)} {n}" for f, n in counts.items()) or "–"


def _cx(counts: Mapping[str, int] | None) -> str:
    return f"{counts['confirmed']} / {counts['refused']}" if counts else "unknown"


def numbers_section(loop: Mapping[str, Any] | None) -> str:
    if not loop:
        return "No numbers: this build predates the accepted and rejected splits.\n"
    header = [
        "task", "accepted", "withdrawn", "rejected", "rejected by family",
        "counterexamples confirmed / refused", "USD all in", "USD per accepted kernel",
    ]  # fmt: skip

    def line(name: str, n: Mapping[str, Any]) -> list[Any]:
        return [
            name, n["accepted"], n["withdrawn"], n["rejected"], _families(n["rejected_by_family"]),
            _cx(n["counterexamples"]), _money(n["cost_usd"]), _money(n["usd_per_accepted_kernel"]),
        ]  # fmt: skip

    rows = [line(md_text(t), n) for t, n in loop["by_task"].items()]
    rows.append(line("**all**", loop["overall"]))
    overall = loop["overall"]
    cases = loop.get("regression_cases") or []
    case_rows = [
        [
            md_code(c["counterexample"]),
            md_text(c["task"]),
            md_text(c["finder"] or "?"),
            c["withdrew"],
            ", ".join(f"{md_code(k['kernel_path'])}@{md_text(str(k['commit'])[:10])}" for k in c["kernels"])
            or "–",
        ]
        for c in cases
    ]
    cases_text = (
        _table(["regression case", "task", "finder", "kernels withdrawn", "which"], case_rows)
        if case_rows
        else "No regression case yet."
    )
    cost_note = (
        f"The swarm spent {_money(overall['cost_usd'])} in all, {_money(overall['rejected_usd'])} of it on "
        f"rejected attempts and {_money(overall['red_team_usd'])} by the red team: "
        f"**{_money(overall['usd_per_accepted_kernel'])} per accepted kernel**."
        if loop.get("cost_known")
        else "No cost data: the gateway had no monitor."
    )
    cx_note = (
        ""
        if loop.get("counterexamples_known")
        else " The gateway lists no counterexamples (no `/api/counterexamples`): their counts are unknown."
    )
    return f"""Accepted and withdrawn count kernels (task, path, commit); rejected counts records (every
verification that failed the gate). *USD all in* is everything booked to the task — the accepted and the
rejected attempts, reviews — plus the red team's spend while it held no task, shared over the tasks it
attacked by its counterexamples; divided by the task's accepted kernels. {cost_note}{cx_note}

{_table(header, rows)}

### Regression cases

What each confirmed counterexample (a regression case of its task) withdrew from the accepted split.

{cases_text}
"""


def splits_section() -> str:
    families = "\n".join(f"- `{f}`: {FAMILY_DOCS[f]}." for f in FAMILY_ORDER)
    return f"""One table, three files each as Parquet and JSON Lines, one schema:

| split | file | rows |
|---|---|---|
| `train` | `data/records.parquet` | every verification attempt (`status` says which kind) |
| `accepted` | `data/accepted.parquet` | `status == "accepted"`: merged, verified at its head, not withdrawn |
| `rejected` | `data/rejected.parquet` | `status == "rejected"`: failed the gate (fail, error, unverifiable) |

A `withdrawn` row was accepted until a confirmed counterexample broke it: it is in `train` only, with
`withdrawal` (the reason, the counterexample and its finder, the job that failed it). A rejected row
carries the kernel's source, `flags`, `failing_cases`, `family`, the author, model and cost, and (unless
the swarm opted out with `dataset: {{rejected_timelines: false}}`) `timeline`, the author's wakes, model
calls and tool calls that produced it, bounded in bytes. Families of rejected rows (`family`):

{families}
"""
