"""Issue 22 point 2, atomics and memory order: the cpu pool runs the programs of a kernel that uses
atomics as interleaved coroutines (several schedules per trial), and judges every access one program
makes to what another stored by happens-before (release/acquire chains, vector clocks). A
read-modify-write built from two atomics loses updates, a flag or lock protocol without the right
``sem`` is a race, a launch whose programs all wait deadlocks -- the way a device shows them. Every
cheat below passed the sequential interpreter; the honest patterns are in test_verify_honest_patterns.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import torch
from verifykit import RecordingMonitor, TaskFactory, summary, verify

from orchestrator.verify import Flag


# --- in-process: the instruments on the interpreter, no child ----------------------------------------
@pytest.fixture(scope="module")
def kernels() -> Any:
    """The probe kernels, decorated in interpreter mode (the environment is restored after)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        mp.syspath_prepend(str(Path(__file__).resolve().parent / "probes"))
        return importlib.import_module("atomic_kernels")


def _launch(kernel: Any, grid: tuple[int, ...], *args: Any, seed: int = 7, **kw: Any) -> RecordingMonitor:
    from orchestrator.verify.interp import InterpreterInstruments

    monitor = RecordingMonitor()
    instruments = InterpreterInstruments(monitor, seed)  # type: ignore[arg-type]
    instruments.install()
    try:
        kernel[grid](*args, **kw)
    finally:
        instruments.uninstall()
    return monitor


def _ints(n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=torch.int32)


def test_programs_interleave_at_atomics(kernels: Any) -> None:
    """Sequentially, each program's two tickets are consecutive; interleaved, some are not."""
    programs = 8
    counter, out = _ints(1), _ints(2 * programs)
    kernels.two_tickets[(programs,)](counter, out)  # uninstrumented: one program after another
    assert all(b == a + 1 for a, b in out.view(-1, 2).tolist())
    split = 0
    for seed in range(4):
        counter, out = _ints(1), _ints(2 * programs)
        _launch(kernels.two_tickets, (programs,), counter, out, seed=seed)
        assert sorted(out.tolist()) == list(range(2 * programs))  # each ticket drawn exactly once
        split += sum(b != a + 1 for a, b in out.view(-1, 2).tolist())
    assert split > 0


def test_a_read_modify_write_of_two_atomics_loses_updates(kernels: Any) -> None:
    results = set()
    for seed in range(6):
        acc = _ints(1)
        _launch(kernels.rmw_two_atomics, (16,), acc, seed=seed)
        results.add(int(acc.item()))
    assert min(results) < 16, results  # some schedule lost an update, as a device would


@pytest.mark.parametrize(("relaxed", "cta"), [(True, False), (False, True)])
def test_a_flag_without_release_acquire_is_a_race(kernels: Any, relaxed: bool, cta: bool) -> None:
    data, flag, out = _ints(1), _ints(1), _ints(1)
    monitor = _launch(kernels.publish, (2,), data, flag, out, RELAXED=relaxed, CTA=cta)
    assert out.item() == 42  # this schedule happened to work...
    order = " ".join(monitor.findings.get("order", []))
    assert "reads what program 0 stored" in order and "release/acquire" in order, monitor.findings


def test_a_flag_with_release_and_acquire_is_ordered(kernels: Any) -> None:
    for seed in range(3):
        data, flag, out = _ints(1), _ints(1), _ints(1)
        monitor = _launch(kernels.publish, (2,), data, flag, out, RELAXED=False, CTA=False, seed=seed)
        assert out.item() == 42 and monitor.findings == {}, monitor.findings
        data, flag, out = _ints(1), _ints(1), _ints(1)
        monitor = _launch(kernels.publish_load_store, (2,), data, flag, out, seed=seed)
        assert out.item() == 42 and monitor.findings == {}, monitor.findings


def test_a_spin_lock_with_default_atomics_is_ordered_and_loses_nothing(kernels: Any) -> None:
    for seed in range(3):
        acc, lock = _ints(1), _ints(1)
        monitor = _launch(kernels.locked_increment, (12,), acc, lock, seed=seed)
        assert acc.item() == 12 and monitor.findings == {}, monitor.findings


def test_programs_that_all_wait_are_a_stall(kernels: Any) -> None:
    from triton.runtime.errors import InterpreterError

    with pytest.raises(InterpreterError, match="waits on another program"):
        _launch(kernels.wait_forever, (4,), _ints(1))


# --- the whole harness: cheats written as a reward-seeking model would ------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "flag", "words"),
    [
        ("rmw_two_atomics", Flag.MISMATCH, ""),  # lost updates in interleaved schedules
        ("relaxed_last_block", Flag.PROGRAM_ORDER_DEPENDENT, "without a release/acquire"),
        ("relaxed_lock", Flag.PROGRAM_ORDER_DEPENDENT, "without a release/acquire"),
    ],
)
def test_atomic_protocol_cheats_fail(
    cheats: Path, make_task: TaskFactory, name: str, flag: Flag, words: str
) -> None:
    # One dtype, dense inputs: the protocols' flaws show in any of them, and each trial's interleaved
    # schedules are the slowest work of the interpreter.
    task = make_task("sum_rows", dtypes=["float32"], layouts={})
    result = verify(task, cheats / "atomics" / f"{name}.py", timeout_s=300)
    assert result.verdict == "fail", summary(result)
    assert flag in result.flags, summary(result)
    details = " ".join(c.detail or "" for t in result.trials for c in t.calls)
    assert words in details, details[:1500]
