"""The dataset's columns: one Arrow schema that drives the Parquet file, the card and docs/dataset.md."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

SCHEMA_VERSION = 4  # 3: evidence added; 4: status, withdrawal, family, failing_cases, timeline

TRIAL = pa.struct(
    [
        ("index", pa.int32()),
        ("shape", pa.string()),  # JSON object, e.g. {"n": 1000}: shapes differ per task
        ("dtype", pa.string()),
        ("seed", pa.int64()),
        ("ok", pa.bool_()),
        ("max_abs_err", pa.float64()),
        ("max_rel_err", pa.float64()),
        ("flags", pa.list_(pa.string())),
    ]
)
TIMING = pa.struct(
    [
        ("shape", pa.string()),
        ("dtype", pa.string()),
        ("candidate_median_ms", pa.float64()),
        ("baseline_median_ms", pa.float64()),
        ("speedup", pa.float64()),
        ("suspicious", pa.bool_()),
    ]
)
FAILING_CASE = pa.struct(
    [
        ("index", pa.int32()),
        ("case", pa.string()),  # JSON object: the trial's shape (its case)
        ("dtype", pa.string()),
        ("seed", pa.int64()),
        ("layout", pa.string()),  # JSON object: input index -> layout
        ("flags", pa.list_(pa.string())),
        ("error", pa.string()),  # the harness's detail, else its flags
        ("max_abs_err", pa.float64()),
        ("regression", pa.string()),  # the regression case's id when the trial was one
    ]
)
WITHDRAWAL = pa.struct(
    [
        ("reason", pa.string()),
        ("counterexample", pa.string()),  # the regression case's id (a confirmed counterexample)
        ("finder", pa.string()),
        ("job", pa.string()),  # the re-verification that failed it
        ("at", pa.float64()),
    ]
)
TIMELINE_ENTRY = pa.struct(
    [
        ("kind", pa.string()),
        ("ts", pa.float64()),
        ("summary", pa.string()),
        ("data", pa.string()),  # JSON object
    ]
)
STATUSES = ("accepted", "withdrawn", "rejected", "other")
REVIEW = pa.struct(
    [
        ("user", pa.string()),
        ("state", pa.string()),
        ("commit_id", pa.string()),
        ("on_head", pa.bool_()),
    ]
)
ENVIRONMENT = pa.struct(
    [
        ("python", pa.string()),
        ("torch", pa.string()),
        ("triton", pa.string()),
        ("numpy", pa.string()),
        ("triton_interpret", pa.string()),
        ("platform", pa.string()),
        ("device", pa.string()),
        ("device_name", pa.string()),
    ]
)


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    doc: str


COLUMNS: tuple[Column, ...] = (
    Column("record_id", pa.string(), "The verification attempt: the job id (unique)."),
    Column("schema_version", pa.int32(), f"Row schema version ({SCHEMA_VERSION})."),
    Column("task", pa.string(), "Task id (tasks/<task>/task.py in the dataset repo)."),
    Column("repo", pa.string(), "org/name of the dataset repo."),
    Column("commit", pa.string(), "Commit the kernel was verified at (the job's resolved sha)."),
    Column("kernel_path", pa.string(), "Path of the candidate module in the repo."),
    Column("kernel_code", pa.string(), "The module's source at that commit (null if unreachable)."),
    Column("kernel_sha256", pa.string(), "SHA-256 of the source bytes (the harness's candidate_sha256)."),
    Column(
        "author", pa.string(), "Agent that wrote the kernel: the commit's author (enforced by the forge)."
    ),
    Column(
        "author_model",
        pa.string(),
        "The author's model: the one the LLM proxy booked most of its tokens under (the upstream's "
        "answer), else the swarm spec's; null if neither knows it.",
    ),
    Column(
        "submitter", pa.string(), "Principal that submitted the job (the author, or a reviewer reproducing)."
    ),
    Column("reproduction", pa.bool_(), "The job reproduced a PR for its review."),
    Column(
        "reviewers", pa.list_(pa.string()), "Who approved or requested changes on the PR (never the author)."
    ),
    Column("approvers", pa.list_(pa.string()), "Reviewers whose approval was on this record's commit."),
    Column("reviews", pa.list_(REVIEW), "Every review of the PR: user, state, commit, on this commit."),
    Column("pr_number", pa.int64(), "PR whose commits include this one (null: no PR)."),
    Column("pr_title", pa.string(), "Its title."),
    Column("pr_state", pa.string(), "open, closed or merged."),
    Column("merge_commit", pa.string(), "The gate's merge commit when merged."),
    Column("accepted", pa.bool_(), "Verdict pass, and this commit is the merged head of a PR into main."),
    Column(
        "status",
        pa.string(),
        "accepted (in the accepted split), withdrawn (was accepted; a confirmed counterexample broke it), "
        "rejected (failed the gate: verdict fail, error or unverifiable) or other (passed, not merged; "
        "the red team's and the heal's own jobs).",
    ),
    Column(
        "withdrawal",
        WITHDRAWAL,
        "Withdrawn rows: why, the counterexample (regression case id) and its finder, the job that failed "
        "the kernel, when (null otherwise).",
    ),
    Column("on_main", pa.bool_(), "main (at build time) holds this exact kernel source at kernel_path."),
    Column("pool", pa.string(), "Job pool (cpu, gpu-h100, npu-910c, ...)."),
    Column("device", pa.string(), "Device type the harness ran on (cpu, cuda, npu)."),
    Column("device_name", pa.string(), "Device model (or CPU architecture)."),
    Column("node", pa.string(), "Node that ran the job."),
    Column("devices", pa.list_(pa.string()), "Device ids the job held."),
    Column("environment", ENVIRONMENT, "Versions in the harness: python, torch, triton, numpy, platform."),
    Column("kind", pa.string(), "verify or bench."),
    Column("state", pa.string(), "Job's final state: succeeded, failed, error, timeout."),
    Column("verdict", pa.string(), "Harness verdict: pass, fail, error, unverifiable."),
    Column("passed", pa.bool_(), "verdict == pass."),
    Column(
        "evidence",
        pa.string(),
        "What the verdict proves, as the gateway derived it from the pool and the verdict: "
        "device-verified, cpu-screened, cpu-shapes-only, unverifiable-on-cpu or none (docs/verification.md).",
    ),
    Column("flags", pa.list_(pa.string()), "Harness flags (mismatch, unwritten_output, ...)."),
    Column("reasons", pa.list_(pa.string()), "Harness reasons, or the job's error."),
    Column(
        "family",
        pa.string(),
        "Rejected rows: why, as a flag family: reward_hack, static, crash, contract, unportable, wrong, "
        "unverifiable or other (null otherwise).",
    ),
    Column(
        "failing_cases",
        pa.list_(FAILING_CASE),
        "Rejected rows: the trials that failed: case, dtype, seed, layout, flags, error, the regression "
        "case it was (if one).",
    ),
    Column("needs_review", pa.bool_(), "The harness asked for a human look (e.g. suspicious speedup)."),
    Column("trials", pa.list_(TRIAL), "Per-trial results: shape, dtype, seed, ok, errors, flags."),
    Column("n_trials", pa.int32(), "Trials run."),
    Column("n_trials_passed", pa.int32(), "Trials that passed."),
    Column("timings", pa.list_(TIMING), "Device timings vs eager per shape (device pools, bench jobs)."),
    Column("speedup", pa.float64(), "Median speedup over eager across timed shapes (null: not measured)."),
    Column("harness_s", pa.float64(), "Harness wall time (s)."),
    Column("job_s", pa.float64(), "Job wall time from start to finish (s)."),
    Column("submitted_at", pa.float64(), "Unix time of submission."),
    Column("finished_at", pa.float64(), "Unix time the job finished."),
    Column("refines", pa.string(), "record_id of the earlier attempt this one refines (lineage), or null."),
    Column("refines_commit", pa.string(), "That record's commit."),
    Column(
        "cost_tokens",
        pa.int64(),
        "LLM tokens the author spent on this task (while holding its claim) since its previous attempt "
        "at it (null: no usage attributed, or no monitor).",
    ),
    Column("cost_usd", pa.float64(), "The same in USD (the LLM proxy's price table)."),
    Column(
        "timeline",
        pa.list_(TIMELINE_ENTRY),
        "Rejected rows: the author's wakes, model calls and tool calls since its previous attempt at the "
        "task up to this submission, oldest first, bounded in bytes (null: other rows, no monitor, or the "
        "swarm opted out).",
    ),
    Column("timeline_truncated", pa.bool_(), "Older entries of the excerpt were dropped to fit the bound."),
)

SCHEMA = pa.schema([(c.name, c.type) for c in COLUMNS])


def type_name(t: pa.DataType) -> str:
    """Short type names for the card: string, list<string>, list<struct{...}>."""
    if pa.types.is_list(t):
        return f"list<{type_name(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct{" + ", ".join(f.name for f in t) + "}"
    return {"int32": "int32", "int64": "int64", "double": "float64", "bool": "bool"}.get(str(t), str(t))
