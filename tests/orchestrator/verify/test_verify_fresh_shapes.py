"""Shapes no agent has seen (orchestrator/verify/fresh_shapes.py): every run drawn from a seed base also
runs cases drawn fresh from the task's input domain, so a kernel right only on the shapes it was shown
fails; the draw is the base's, so ``--seed-base`` reproduces a failure exactly; explicit seeds (a
replay of fixed trials) draw none."""

from __future__ import annotations

import json
import subprocess
import sys

from verifykit import CATALOGUE, CHEATS, ROOT, solution, summary, verify

from orchestrator.verify.fresh_shapes import draw_cases
from orchestrator.verify.tasks import load_task

SHOWN_ONLY = CHEATS / "fresh_shapes" / "shown_lengths_only.py"


def test_fresh_cases_are_inside_the_domain_new_and_within_the_pools_size() -> None:
    for name in ("add", "softmax", "matmul", "moe_topk_routing", "rope", "masked_cross_entropy"):
        task = load_task(CATALOGUE / name)
        assert task.domain is not None
        largest = max(_elements(c, task.dims) for c in task.cpu_shapes)
        for base in range(40):
            cases = draw_cases(task, base, device=False)
            assert len(cases) == 2, (name, base)
            for case in cases:
                assert task.domain.check(case) == [], (name, case)
                assert case not in list(task.domain.points.values())
                assert _elements(case, task.dims) <= largest
        assert draw_cases(task, 7, device=False) == draw_cases(task, 7, device=False), "the base's draw"
        assert any(draw_cases(task, b, False) != draw_cases(task, 7, False) for b in range(8, 12))


def _elements(case: dict[str, int], dims: tuple[str, ...]) -> int:
    out = 1
    for d in dims:
        out *= case[d]
    return out


def test_a_kernel_right_only_on_the_shapes_it_was_shown_fails_on_a_fresh_one() -> None:
    result = verify(CATALOGUE / "add", SHOWN_ONLY, "cpu", seed_base=7)
    assert result.verdict == "fail", summary(result)
    fixed = [t for t in result.trials if not t.fresh]
    fresh = [t for t in result.trials if t.fresh]
    assert fixed and all(t.ok for t in fixed), "every case it was shown passes"
    assert fresh and not any(t.ok for t in fresh), summary(result)
    assert all(t.shape["n"] not in (37, 1000, 3001) for t in fresh)


def test_the_honest_kernel_passes_its_fresh_shapes() -> None:
    result = verify(CATALOGUE / "add", solution("add"), "cpu", seed_base=7)
    assert result.verdict == "pass", summary(result)
    assert sum(t.fresh for t in result.trials) == 4  # 2 fresh cases x 2 dtypes


def test_the_seed_base_reproduces_the_fresh_failure_and_explicit_seeds_draw_none(tmp_path) -> None:
    first = verify(CATALOGUE / "add", SHOWN_ONLY, "cpu")  # a base drawn from the OS, as every job
    assert first.seed_base is not None and first.verdict == "fail"
    out = tmp_path / "replay.json"
    argv = [sys.executable, "-m", "orchestrator.verify", "--task", str(CATALOGUE / "add")]
    argv += ["--candidate", str(SHOWN_ONLY), "--seed-base", str(first.seed_base), "--out", str(out)]
    subprocess.run(argv, cwd=ROOT, capture_output=True, timeout=600, check=False)
    replay = json.loads(out.read_text())
    assert [(t["shape"], t["dtype"], t["ok"]) for t in replay["trials"] if t["fresh"]] == [
        (t.shape, t.dtype, t.ok) for t in first.trials if t.fresh
    ]
    fixed_only = verify(CATALOGUE / "add", SHOWN_ONLY, "cpu", seeds=first.seeds)
    assert not any(t.fresh for t in fixed_only.trials) and fixed_only.verdict == "pass"


def test_job_show_prints_the_command_that_reproduces_the_run(tmp_path) -> None:
    """``kswarm job show``'s reproduction command, run as printed (the kernel checked out at the job's
    sha), fails the same fresh trials the job failed."""
    from orchestrator.cli.jobs import reproduction

    first = verify(CATALOGUE / "add", SHOWN_ONLY, "cpu")
    checkout = tmp_path / "k"
    (checkout / "kernels" / "add").mkdir(parents=True)
    (checkout / "kernels" / "add" / "k.py").write_text(SHOWN_ONLY.read_text())
    git = ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "k"], check=True)
    sha = subprocess.run([*git[:3], "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    job = {"sha": sha, "task": "add", "kernel": "kernels/add/k.py", "pool": "cpu", "repo": "kswarm/kernels"}
    command = reproduction({**job, "result": first.model_dump(mode="json")})
    assert command is not None and f"--seed-base {first.seed_base}" in command
    out = tmp_path / "again.json"
    line = command.replace("CHECKOUT", str(checkout)).replace("python ", f"{sys.executable} ", 1)
    subprocess.run(f"{line} --out {out}", shell=True, cwd=ROOT, capture_output=True, timeout=600)
    again = json.loads(out.read_text())
    assert again["verdict"] == "fail"
    assert [(t["shape"], t["ok"]) for t in again["trials"] if t["fresh"]] == [
        (t.shape, t.ok) for t in first.trials if t.fresh
    ]
    assert reproduction({**job, "result": None}) is None, "nothing to reproduce before the harness answered"
