"""The task catalogue: every task loads in the harness's format and its reference runs; the reference
solutions pass the real harness on the cpu pool and the deliberately wrong one is flagged."""

from __future__ import annotations

import queue
import random
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest
import torch

from gateway.tasks.catalogue import (
    catalogue,
    dataset_files,
    kb_files,
    solution_names,
    solution_path,
    task_dir,
    task_names,
    wrong_solution_names,
    wrong_solution_path,
)
from orchestrator.verify import VerificationResult
from orchestrator.verify.forkserver import ForkServer
from orchestrator.verify.harness import verify
from orchestrator.verify.layouts import apply_layouts
from orchestrator.verify.static.gate import check_source
from orchestrator.verify.tasks import load_task, torch_dtype

REQUIRED = {
    "add", "mul", "relu", "gelu", "silu", "sum_rows", "max_rows", "argmax_rows", "softmax", "log_softmax",
    "layernorm", "rmsnorm", "matmul", "bmm", "matmul_bias_relu", "embedding", "rope", "moe_topk_routing",
    "masked_cross_entropy",
}  # fmt: skip
# Catalogue solutions whose device shapes the sample cannot judge, and why (docs/verification.md).
NOT_SCREENED = {
    "embedding": "none within the cpu budget",  # every device shape's table is hundreds of MB
    "masked_cross_entropy": "not judged",  # one scalar that depends on every row's program
}


def outputs(value: object) -> list[torch.Tensor]:
    return list(value) if isinstance(value, tuple) else [value]  # type: ignore[list-item]


def test_catalogue_covers_the_required_operators() -> None:
    names = task_names()
    assert len(names) >= 24 and REQUIRED <= set(names)
    infos = {t.name: t for t in catalogue()}
    assert set(infos) == set(names), "NAME matches the directory"
    assert {i.category for i in infos.values()} >= {
        "elementwise", "activation", "reduction", "normalization", "matmul", "gather", "routing", "loss",
    }  # fmt: skip
    assert all(i.title and i.description and i.entry for i in infos.values())


@pytest.mark.parametrize("name", task_names())
def test_catalogue_task_loads_and_reference_runs(name: str) -> None:
    task = load_task(task_dir(name))
    assert task.entry == name and task.name == name
    assert "bfloat16" not in task.dtypes, "bf16 cannot be verified on the cpu pool: device-only tasks"
    source = (task_dir(name) / "task.py").read_text()
    assert "SEED_COUNT" in source and "\nSEEDS" not in source, "how many seeds, never which"
    assert task.dims and set(task.dims) <= set(task.cpu_shapes[0]), "DIMS names the dimension keys"
    for case in task.cpu_shapes:
        for dtype in task.dtypes:
            first = task.make_inputs(dict(case), torch_dtype(dtype), 0, "cpu")
            again = task.make_inputs(dict(case), torch_dtype(dtype), 0, "cpu")
            other = task.make_inputs(dict(case), torch_dtype(dtype), 1, "cpu")
            tensors = [(a, b) for a, b in zip(first, again, strict=True) if isinstance(a, torch.Tensor)]
            assert all(torch.equal(a, b) for a, b in tensors), "inputs are a function of the seed"
            assert any(
                not torch.equal(a, b)
                for a, b in zip(first, other, strict=True)
                if isinstance(a, torch.Tensor)
            ), "seeds differ"
            with torch.no_grad():
                for out in outputs(task.reference(*first)):
                    assert isinstance(out, torch.Tensor) and bool(torch.isfinite(out.double()).all())
    # Device shapes are only generated on devices; their metadata must at least be consistent.
    assert len(task.shapes) >= 3 and all(
        set(c) >= set(task.cpu_shapes[0]) - {"zero_mask"} for c in task.shapes
    )


@pytest.mark.parametrize("name", task_names())
def test_catalogue_layouts_are_what_real_callers_pass(name: str) -> None:
    """Every declared layout builds, keeps the logical values, and the reference gives the same
    answer on it as on dense inputs (broadcast inputs change values by design: only finiteness)."""
    task = load_task(task_dir(name))
    assert task.input_layouts, "every catalogue task declares the layouts its callers pass"
    case = task.cpu_shapes[0]
    dense = list(
        task.make_inputs(
            dict(case), torch.float32 if "float32" in task.dtypes else torch_dtype(task.dtypes[0]), 5, "cpu"
        )
    )
    for j in range(max(len(v) for v in task.input_layouts.values())):
        layout = task.layout_for(j)
        laid = apply_layouts(dense, layout, random.Random(j))
        with torch.no_grad():
            got, want = outputs(task.reference(*laid)), outputs(task.reference(*dense))
        for a, b in zip(got, want, strict=True):
            assert bool(torch.isfinite(a.double()).all()), (name, layout)
            if "broadcast" not in layout.values():
                assert torch.allclose(a.double(), b.double(), atol=1e-5, rtol=1e-5), (name, layout)


def test_catalogue_masked_cross_entropy_defines_the_all_zero_mask() -> None:
    task = load_task(task_dir("masked_cross_entropy"))
    for cases in (task.cpu_shapes, task.shapes):
        assert any(c.get("zero_mask") for c in cases) and any(not c.get("zero_mask") for c in cases)
    case = next(c for c in task.cpu_shapes if c.get("zero_mask"))
    for dtype in task.dtypes:
        logits, targets, mask = task.make_inputs(dict(case), torch_dtype(dtype), 3, "cpu")
        assert float(mask.sum()) == 0.0
        loss = task.reference(logits, targets, mask)
        assert loss.shape == () and loss.dtype == torch.float32 and float(loss) == 0.0, "defined, never NaN"
        naive = (torch.nn.functional.cross_entropy(logits.float(), targets, reduction="none") * mask).sum()
        assert torch.isnan(naive / mask.sum()), "the naive formula is exactly the production NaN"
    case = next(c for c in task.cpu_shapes if not c.get("zero_mask"))
    logits, targets, mask = task.make_inputs(dict(case), torch.float32, 0, "cpu")
    expected = torch.nn.functional.cross_entropy(logits[mask.bool()], targets[mask.bool()])
    assert torch.allclose(task.reference(logits, targets, mask), expected, atol=1e-5)


def test_catalogue_solutions_pass_the_static_gate() -> None:
    assert len(solution_names()) >= 8 and set(solution_names()) <= set(task_names())
    for name in solution_names():
        report = check_source(solution_path(name).read_text(), load_task(task_dir(name)).entry)
        assert not report.violations and not report.unverifiable, (name, report)


def test_catalogue_dataset_template_and_kb_seed() -> None:
    files = dataset_files()
    for name in task_names():
        assert files[f"tasks/{name}/task.py"] == (task_dir(name) / "task.py").read_bytes()
        assert f"kernels/{name}/" in files[f"kernels/{name}/README.md"].decode()
    readme = files["README.md"].decode()
    assert "$task" not in readme and all(f"`{n}`" in readme for n in task_names())
    assert "kernels/README.md" in files and "tasks/README.md" in files
    notes = kb_files()
    assert "README.md" in notes and len([p for p in notes if p.startswith("notes/")]) >= 5
    text = b"\n".join(notes.values()).decode()
    for topic in ("tl.arange", "tl.program_id", "tl.constexpr", "TRITON_INTERPRET=1", "torch_npu", "8 cards"):
        assert topic in text, topic


def test_catalogue_reference_solutions_pass_and_the_wrong_one_is_flagged() -> None:
    """Every solution through the real harness (a child process each, two at a time, each forked from
    one of two fork servers: a zygote imports torch and Triton once, as for a job's several candidates):
    each passes, its device shapes screened by sampling programs (evidence "cpu-screened"), or says why
    they could not be; the deliberately wrong one is flagged."""
    jobs = [(n, solution_path(n)) for n in solution_names()]
    jobs += [(n, wrong_solution_path(n)) for n in wrong_solution_names()]
    assert wrong_solution_names(), "at least one deliberately wrong solution"
    servers: queue.Queue[ForkServer] = queue.Queue()

    def run(task: str, candidate: Path) -> tuple[str, VerificationResult]:
        server = servers.get()
        try:
            return task, verify(task_dir(task), candidate, "cpu", server=server)
        finally:
            servers.put(server)

    with ExitStack() as stack, ThreadPoolExecutor(max_workers=2) as pool:
        for _ in range(2):
            servers.put(stack.enter_context(ForkServer(interpret=True)))
        results = list(pool.map(lambda job: run(*job), jobs))
    honest = results[: len(solution_names())]
    wrong = results[len(solution_names()) :]
    assert [(t, r.verdict, r.reasons) for t, r in honest if r.verdict != "pass"] == []
    for name, result in honest:
        device = [t for t in result.trials if t.sampled]
        if name in NOT_SCREENED:  # said so in the reasons, never "screened"
            assert result.evidence == "cpu-shapes-only", (name, result.reasons)
            assert any(r.startswith("pass (cpu shapes only)") for r in result.reasons), result.reasons
            assert NOT_SCREENED[name] in " ".join(result.reasons), (name, result.reasons)
            continue
        task = load_task(task_dir(name))
        assert result.evidence == "cpu-screened", (name, result.evidence, result.reasons)
        assert {t.dtype for t in device} == {d for d in task.dtypes if d != "bfloat16"}, name
        assert all(t.shape in task.shapes for t in device), name
    for name, result in wrong:
        flags = [str(f) for f in result.flags]
        assert result.verdict == "fail" and "mismatch" in flags, (name, result.verdict, flags, result.reasons)
