"""Principle 2: the monitor cannot be switched off or side-stepped. Tripwires record every switch the
candidate flips, an integrity check after each call compares the process with its baseline, and the
runner uses private references (a patched torch.save changes nothing). Each cheat passed before."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest
from verifykit import TaskFactory, summary, verify

from orchestrator.verify import Flag, integrity
from orchestrator.verify.integrity import Integrity


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "flag"),
    [
        ("disable_dispatch", Flag.MONITOR_TAMPERED),  # torch._C._DisableTorchDispatch around torch.add
        ("pop_dispatch_mode", Flag.MONITOR_TAMPERED),  # pops the mode, computes, pushes it back
        ("patch_save", Flag.MONITOR_TAMPERED),  # rewrites what torch.save writes
        ("profile_after_return", Flag.MONITOR_TAMPERED),  # sys.setprofile to compute after return
        ("atexit_rewrite", Flag.MONITOR_TAMPERED),  # rewrites output files at exit
        ("class_swap", Flag.MONITOR_TAMPERED),  # __class__ assignment on an input
        ("hide_from_policy", Flag.TORCH_COMPUTE),  # looks for the allow-list in sys.modules: gone
        ("lazy_result", Flag.NOT_A_TENSOR),  # a list whose __iter__ adds after the call returned
    ],
)
def test_tampering_is_caught(make_task: TaskFactory, cheats: Path, name: str, flag: Flag) -> None:
    result = verify(
        make_task("add", dtypes=["float32"], layouts={}), cheats / f"{name}.py", enforce_static=False
    )
    assert result.verdict == "fail", summary(result)
    assert flag in result.flags, summary(result)


@pytest.mark.slow
def test_a_forged_report_stream_cannot_hide_what_was_seen(make_task: TaskFactory, cheats: Path) -> None:
    """The candidate writes a clean-looking report for every trial into the report pipe and exits 0
    before the runner reports; the findings were streamed to the parent as they happened."""
    result = verify(
        make_task("add", dtypes=["float32"], layouts={}), cheats / "forge_and_exit.py", enforce_static=False
    )
    assert result.verdict in ("fail", "error"), summary(result)
    assert Flag.TIMEOUT not in result.flags
    # What the monitor saw before the forgery stays seen. (When the job's schedule made the first
    # call a blind one, nothing watched it: then the forgery is still refused, as a broken stream.)
    first = result.trials[0].calls[0].kind if result.trials and result.trials[0].calls else "?"
    assert Flag.TORCH_COMPUTE in result.flags or first == "blind", summary(result)
    assert any("report stream" in r or "without reporting" in r for r in result.reasons), summary(result)


@pytest.mark.slow
def test_patched_save_changes_nothing(make_task: TaskFactory, cheats: Path) -> None:
    result = verify(
        make_task("add", dtypes=["float32"], layouts={}), cheats / "patch_save.py", enforce_static=False
    )
    assert Flag.UNWRITTEN_OUTPUT in result.flags  # what it returned was saved, not what it forged
    assert any("torch.save was rebound" in r for r in result.reasons)


def _integrity() -> tuple[Integrity, dict]:
    namespace = {"allow": frozenset({"view"})}
    probe_state = {"alive": True}
    check = Integrity({"harness": namespace}, [json.JSONEncoder], lambda: probe_state["alive"])
    check.snapshot()
    return check, {"ns": namespace, "probe": probe_state}


@pytest.fixture(params=["versions", "every binding"])
def versions(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Both ways of checking a module: skipped while its dict's version is unchanged, or compared."""
    if request.param == "every binding":
        monkeypatch.setattr(integrity, "dict_version", None)
    return request.param == "versions"


def test_integrity_sees_rebinding_hooks_and_a_dead_probe(versions: bool) -> None:
    check, state = _integrity()
    assert check.check(None) == []
    original = json.dumps
    json.dumps = lambda *a, **k: "{}"  # a patched library function
    try:
        assert any("json.dumps was rebound" in p for p in check.check(None))
    finally:
        json.dumps = original
    state["ns"]["allow"] = frozenset({"view", "add"})  # the harness's own namespace
    assert any("harness.allow was rebound" in p for p in check.check(None))
    state["ns"]["allow"] = frozenset({"view"})
    check.snapshot()
    json.JSONEncoder.extra = 1  # type: ignore[attr-defined]  # a class the harness relies on
    try:
        assert any("JSONEncoder.extra was added" in p for p in check.check(None))
    finally:
        del json.JSONEncoder.extra  # type: ignore[attr-defined]
    previous = signal.signal(signal.SIGUSR2, lambda *_: None)
    try:
        assert any("signal handler" in p for p in check.check(None))
    finally:
        signal.signal(signal.SIGUSR2, previous)
    before = sys.getprofile()
    sys.setprofile(lambda *a: None)
    try:
        assert any("profile" in p for p in check.check(None))
    finally:
        sys.setprofile(before)
    state["probe"]["alive"] = False
    assert any("audit hook" in p for p in check.check(None))
    state["probe"]["alive"] = True
    assert check.check(None) == []


def test_this_interpreter_has_dict_versions_and_unchanged_modules_are_not_compared() -> None:
    """The fast path is what runs here (CPython 3.11): a check compares only the modules whose dict
    changed since they last matched (a few that count things as they run), and a changed module is
    compared once, then skipped again while it matches."""
    assert integrity.dict_version is not None
    check, _ = _integrity()
    check.check(None)  # modules that changed since the snapshot (lazy imports) are compared once
    compared = check.compared
    assert check.check(None) == []
    assert check.compared - compared < len(check.modules) / 20
    json.some_flag = 1  # type: ignore[attr-defined]  # plain data added: tolerated
    try:
        assert check.versions["json"][1] != integrity.dict_version(vars(json))
        assert check.check(None) == []
        assert check.versions["json"][1] == integrity.dict_version(vars(json))  # compared, matched
    finally:
        del json.some_flag  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "disguise",
    ["same size", "deleted and re-added", "rebound twice", "the same dict object through the module"],
)
def test_a_rebinding_disguised_for_the_fast_path_is_still_seen(versions: bool, disguise: str) -> None:
    """Attacks on the version shortcut: keep the namespace's size and keys, rebind and re-rebind,
    or write through ``__dict__`` instead of ``setattr``; each leaves json.dumps not what it was."""
    check, _ = _integrity()
    check.check(None)
    original = json.dumps

    def fake(*args: object, **kwargs: object) -> str:
        return "{}"

    try:
        if disguise == "same size":
            json.dumps = fake
        elif disguise == "deleted and re-added":
            del json.dumps
            json.dumps = fake
        elif disguise == "rebound twice":
            json.dumps = fake
            assert any("json.dumps was rebound" in p for p in check.check(None))
            json.dumps = lambda *a, **k: "[]"
        else:
            vars(json)["dumps"] = fake
        assert any("json.dumps was rebound" in p for p in check.check(None))
    finally:
        json.dumps = original
    assert check.check(None) == []


@pytest.mark.parametrize("blind", ["c_uint64.value", "builtins.all", "builtins.len"])
def test_patching_what_the_check_itself_calls_does_not_blind_it(versions: bool, blind: str) -> None:
    """The candidate patches the helpers the check runs on before the baseline is even taken: a
    ``value`` property on ``ctypes.c_uint64`` that repeats each dict's first version (every module would
    look unchanged), or a ``builtins.all``/``len`` that says every namespace matches. The check uses
    what it captured when it was loaded, so the rebinding after it is still seen."""
    import builtins
    import ctypes

    real_value = vars(ctypes._SimpleCData)["value"]
    first: dict[int, int] = {}
    real_all, real_len = builtins.all, builtins.len
    try:
        if blind == "c_uint64.value":
            ctypes.c_uint64.value = property(  # type: ignore[attr-defined]
                lambda self: first.setdefault(ctypes.addressof(self), real_value.__get__(self))
            )
        check, _ = _integrity()
        check.check(None)
        original = json.dumps
        json.dumps = lambda *a, **k: "{}"
        try:
            if blind == "builtins.all":
                builtins.all = lambda _: True
            elif blind == "builtins.len":
                builtins.len = lambda _: 0
            problems = check.check(None)
        finally:
            builtins.all, builtins.len = real_all, real_len
            json.dumps = original
        assert any("json.dumps was rebound" in p for p in problems), problems[:5]
    finally:
        if "value" in vars(ctypes.c_uint64):
            del ctypes.c_uint64.value  # type: ignore[attr-defined]
