"""The diff model behind the PR page's views (``gateway/ui/diffs.py``) and the evidence beside a kernel
file (``gateway/ui/kernel_evidence.py``), without a gateway."""

from __future__ import annotations

from typing import Any

from gateway.ui.diffs import split_diff
from gateway.ui.kernel_evidence import evidence_by_path

MODIFIED = """diff --git a/k.py b/k.py
--- a/k.py
+++ b/k.py
@@ -1,4 +1,4 @@
 a = 1
-b = 2
-c = 3
+b = 20
 d = 4
+e = 5
"""
ADDED = """diff --git a/n.py b/n.py
new file mode 100644
--- /dev/null
+++ b/n.py
@@ -0,0 +1,2 @@
+x = "</pre><script>alert(1)</script>"
+y = 2
"""


def test_the_unified_view_keeps_the_diffs_order_and_both_line_numbers() -> None:
    (f,) = split_diff(MODIFIED).files
    lines = [(line.old, line.new, line.kind) for line in f.hunks[0].lines]
    assert lines == [
        (1, 1, "ctx"),
        (2, None, "del"),
        (3, None, "del"),
        (None, 2, "add"),
        (4, 3, "ctx"),
        (None, 4, "add"),
    ]
    assert not f.is_new and (f.added, f.deleted) == (2, 2)
    # The split view pairs the same lines side by side.
    rows = [(r.left.number, r.left.kind, r.right.number, r.right.kind) for r in f.hunks[0].rows]
    assert rows[1:3] == [(2, "del", 2, "add"), (3, "del", None, "empty")]


def test_a_new_file_is_code_and_its_text_stays_escaped() -> None:
    (f,) = split_diff(ADDED).files
    assert f.is_new and f.status == "added"
    assert [line.new for line in f.hunks[0].lines] == [1, 2]
    html = "".join(str(line.html) for line in f.hunks[0].lines)
    assert "<script>" not in html and "&lt;script&gt;" in html


def job(job_id: str, kernel: str, pool: str, submitted: float, **extra: Any) -> dict[str, Any]:
    return {"id": job_id, "kernel": kernel, "kind": "verify", "pool": pool, "submitted": submitted, **extra}


def test_the_evidence_is_the_newest_job_per_pool_with_its_failing_cases() -> None:
    failing = {"index": 1, "shape": {"n": 4096}, "dtype": "float16", "ok": False, "max_abs_err": 0.5,
               "max_rel_err": 2.0, "atol": 0.01, "rtol": 0.01, "flags": ["mismatch"]}  # fmt: skip
    result = {"trials": [{"index": 0, "ok": True}, failing], "flags": ["mismatch"]}
    jobs = [
        job("j-old", "k.py", "cpu", 1.0, verdict="pass"),
        job("j-new", "k.py", "cpu", 2.0, verdict="fail", result=result),
        job("j-gpu", "k.py", "gpu", 1.5, verdict="pass"),
        job("j-other", "other.py", "cpu", 3.0),
    ]
    found = evidence_by_path(jobs)
    assert [j["id"] for j in found["k.py"]] == ["j-new", "j-gpu"]
    newest = found["k.py"][0]
    assert (newest["trials_run"], newest["trials_failed"]) == (2, 1)
    (case,) = newest["failing"]
    assert case["shape"] == "n=4096" and case["dtype"] == "float16"
    assert case["tolerance"] == "atol 0.01 · rtol 0.01"
    assert [j["id"] for j in found["other.py"]] == ["j-other"]
