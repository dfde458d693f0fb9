"""The fork server (issue 16): every child is a fresh fork of a pristine zygote that imported torch and
Triton once. Attacks on what a forked child inherits: the parent's references, the job's plan, state
another candidate of the same zygote left behind (attributes, variables, modules, files, a daemon),
the zygote itself. Every other test of this directory runs through the fork server too (the default
path of ``verify``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from verifykit import TaskFactory, solution, summary

from orchestrator.verify import Flag, forkserver, verify
from orchestrator.verify.forkserver import ForkServer
from orchestrator.verify.protocol import JSON, ReportBuilder
from orchestrator.verify.seeds import refill_seed
from orchestrator.verify.static.gate import check_source
from orchestrator.verify.tasks import load_task, torch_dtype

PROBES = Path(__file__).resolve().parent / "probes"
NEEDLE_BYTES = 64  # sixteen float32 values of random data: nothing else in the process holds them
SEEDS = [1234567, 2345678, 3456789, 4567890, 5678901]
NOBODY = 65534
# Every way to read the process's own CPU time (what tells a fork of a warm interpreter).
CPU_TIME_READERS = {
    "process_time": "time.process_time()",
    "os_times": "os.times().user",
    "getrusage": "resource.getrusage(resource.RUSAGE_SELF).ru_utime",
    "clock_gettime": "time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)",
}


def _probe(name: str, folder: Path, out: Path, **fill: str) -> Path:
    source = (PROBES / name).read_text().replace("__OUT__", str(out))
    for key, value in fill.items():
        source = source.replace(f"__{key}__", value)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(source)
    return path


def _needles(task_dir: Path) -> dict[str, str]:
    """The first bytes of every reference a job with SEEDS computes (refills included), by name."""
    task = load_task(task_dir)
    out = {}
    for trial in task.trials(cpu=True, seeds=SEEDS):
        dtype = torch_dtype(trial.dtype)
        for kind, seed in (("ref", trial.seed), ("refill", refill_seed(trial.seed))):
            inputs = task.make_inputs(dict(trial.case), dtype, seed, "cpu")
            reference = task.reference(*inputs).contiguous()
            raw = reference.view(-1).view(torch.uint8)[:NEEDLE_BYTES].clone()
            out[f"{kind}:{trial.index}"] = bytes(raw.tolist()).hex()
    return out


@pytest.mark.slow
def test_the_child_cannot_find_the_references_or_a_later_trials_plan(
    make_task: TaskFactory, tmp_path: Path
) -> None:
    """A candidate that searches its whole memory (every gc-tracked object, every tensor's storage,
    every bytes object) before each call finds no reference output the parent computed, and no plan
    of a trial that has not started: the parent keeps the references, and sends a trial's plan only
    once the one before it was reported. (Before the lockstep, the whole schedule was in the child.)"""
    task = make_task("add", dtypes=["float32"], layouts={})
    needles = _needles(task)
    out = tmp_path / "seen.jsonl"
    probe = _probe("memory_probe.py", tmp_path / "probe", out, NEEDLES=json.dumps(needles))
    result = verify(task, probe, enforce_static=False, seeds=SEEDS)
    assert result.child is not None and result.child.completed, summary(result)
    seen = [json.loads(line) for line in out.read_text().splitlines()]
    calls = [(trial.index, number) for trial in result.trials for number in range(len(trial.calls))]
    assert len(seen) == len(calls) == sum(len(t.calls) for t in result.trials)
    for (index, number), obs in zip(calls, seen, strict=True):
        later = {n for n in needles if int(n.split(":")[1]) > index}
        own = {f"refill:{index}"} | ({f"ref:{index}"} if number == 0 else set())
        assert not set(obs["needles"]) & (later | own), (index, number, obs["needles"])
        assert all(plan <= index for plan in obs["plans"]), (index, number, obs["plans"])
    # The search itself ran and was seen: gc is introspection.
    assert "monitor_tampered" in result.flags, summary(result)


@pytest.mark.slow
def test_two_candidates_of_one_zygote_cannot_see_each_other(make_task: TaskFactory, tmp_path: Path) -> None:
    """The first candidate plants state and leaves a daemon behind; the second, forked from the same
    zygote, finds none of it, and its per-job parameters are its own."""
    task = make_task("add", dtypes=["float32"], layouts={})
    a_out, b_out = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    planter = _probe("planter.py", tmp_path / "a", a_out)
    looker = _probe("looker.py", tmp_path / "b", b_out)
    with ForkServer(interpret=True) as server:
        first = verify(task, planter, enforce_static=False, server=server)
        a = json.loads(a_out.read_text().splitlines()[0])
        daemon_gone = not Path(f"/proc/{a['daemon']}").exists()
        zygote = server.zygote_pid
        second = verify(task, looker, enforce_static=False, server=server)
        assert server.zygote_pid == zygote  # one zygote served both
    assert first.child is not None and first.child.completed, summary(first)
    assert second.child is not None and second.child.completed, summary(second)
    assert daemon_gone, f"the first candidate's daemon {a['daemon']} outlived its run"
    b = json.loads(b_out.read_text().splitlines()[0])
    assert a["ppid"] == b["ppid"] == zygote and a["pid"] != b["pid"]
    assert a["sockets_written"] == [], "the child held a socket (the zygote's control socket?)"
    assert not (b["torch_attribute"] or b["variable"] or b["module"]), b
    assert b["cwd"] == [] and b["home"] == [], b
    assert not any(t.startswith("socket:") for t in b["fds"].values()), b["fds"]
    assert a["fresh"] != b["fresh"], "guard bands and sentinels must be drawn per candidate"


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


def _stop(pid: int) -> None:
    """Cleanup of a test's own leftover (a daemon the test's probe started), by its pid."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.slow
def test_a_candidate_that_kills_its_zygote_is_an_error_and_the_next_gets_a_fresh_one(
    make_task: TaskFactory, tmp_path: Path
) -> None:
    task = make_task("add", dtypes=["float32"], layouts={})
    daemon_file = tmp_path / "daemon"
    killer = _probe("zygote_killer.py", tmp_path / "k", daemon_file, SIGNAL="kill")
    try:
        with ForkServer(interpret=True) as server:
            killed = verify(task, killer, enforce_static=False, server=server)
            zygote = server.zygote_pid
            honest = verify(task, solution("add"), server=server)
            assert server.zygote_pid is not None and server.zygote_pid != zygote
    finally:
        # In-process, the orphans of a killed zygote are the caller's (the CLI adopts and kills them:
        # the next test); this one stops its probe's daemon itself.
        _stop(int(daemon_file.read_text()))
    assert killed.verdict == "error" and "crash" in killed.flags, summary(killed)
    assert any("fork server" in r for r in killed.reasons), killed.reasons
    assert honest.verdict == "pass", summary(honest)


@pytest.mark.slow
def test_nothing_of_a_candidate_that_killed_its_zygote_outlives_the_cli(
    make_task: TaskFactory, tmp_path: Path
) -> None:
    """The candidate's daemon is orphaned when it kills the zygote that would have swept it: the CLI is
    a subreaper, so it adopts the daemon and kills it before it exits. (Before, the daemon lived on.)"""
    task = make_task("add", dtypes=["float32"], layouts={})
    daemon_file, out = tmp_path / "daemon", tmp_path / "result.json"
    killer = _probe("zygote_killer.py", tmp_path / "k", daemon_file, SIGNAL="kill")
    cli = [sys.executable, "-P", "-s", "-m", "orchestrator.verify", "--task", str(task)]
    cli += ["--candidate", str(killer), "--pool", "cpu", "--out", str(out), "--static-advisory"]
    done = subprocess.run(cli, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    daemon = int(daemon_file.read_text())
    try:
        assert not _alive(daemon), f"the candidate's daemon {daemon} outlived the harness"
    finally:
        _stop(daemon)
    assert done.returncode == 2, done.stderr[-2000:]
    assert any("fork server" in r for r in json.loads(out.read_text())["reasons"])


@pytest.mark.slow
def test_a_candidate_that_stops_its_zygote_is_an_error_and_leaves_nothing(
    make_task: TaskFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopped zygote can neither sweep the child's daemon nor report an exit: the run is an error
    at the deadline, and retiring the zygote kills everything below it first. (Before, the daemon
    lived on.)"""
    monkeypatch.setattr(forkserver, "EXIT_GRACE_S", 2.0)  # a stopped zygote never answers anyway
    task = make_task("add", dtypes=["float32"], layouts={})
    daemon_file = tmp_path / "daemon"
    stopper = _probe("zygote_killer.py", tmp_path / "s", daemon_file, SIGNAL="stop")
    try:
        with ForkServer(interpret=True) as server:
            stopped = verify(task, stopper, enforce_static=False, server=server, timeout_s=20)
            daemon = int(daemon_file.read_text())
            assert not _alive(daemon), f"the candidate's daemon {daemon} outlived its zygote"
            honest = verify(task, solution("add"), server=server)
    finally:
        _stop(int(daemon_file.read_text()))
    assert stopped.verdict == "error" and "crash" in stopped.flags, summary(stopped)
    assert any("fork server" in r for r in stopped.reasons), stopped.reasons
    assert honest.verdict == "pass", summary(honest)


def test_a_broken_zygote_is_an_error_saying_why(make_task: TaskFactory, tmp_path: Path) -> None:
    """An interpreter that cannot start (or import torch) is the harness's failure: verdict error with
    the reason, never a pass and never a traceback."""
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'no torch here' >&2\nexit 7\n")
    broken.chmod(0o755)
    with ForkServer(interpret=True, python=str(broken)) as server:
        result = verify(make_task("add", dtypes=["float32"], layouts={}), solution("add"), server=server)
    assert result.verdict == "error" and "crash" in result.flags, summary(result)
    assert any("fork server died" in r and "no torch here" in r for r in result.reasons), result.reasons


def test_a_fork_server_of_another_pool_is_refused(add_task: Path) -> None:
    server = ForkServer(interpret=False)  # never started: refused before anything runs
    with pytest.raises(ValueError, match="fork server"):
        verify(add_task, solution("add"), "cpu", server=server)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the zygote waits on pidfds (Linux 5.3+)")
def test_the_zygote_refuses_a_fork_request_without_its_descriptors() -> None:
    """Anything on the control socket but a well-formed request is refused, and the zygote still forks."""
    with ForkServer(interpret=True) as server:
        server.start()
        zygote = server._zygote
        assert zygote is not None
        zygote.sock.send(json.dumps({"op": "fork"}).encode())  # no descriptors
        event = zygote.receive(time.monotonic() + 120)
        assert event is not None and event.get("event") == "refused", event
        assert zygote.alive()
        r, w = os.pipe()
        socket.send_fds(zygote.sock, [b"not json at all"], [r])
        os.close(r)
        os.close(w)
        event = zygote.receive(time.monotonic() + 30)
        assert event is not None and event.get("event") == "refused", event


@pytest.mark.slow
@pytest.mark.parametrize("reader", sorted(CPU_TIME_READERS))
def test_a_candidate_that_checks_whether_it_was_forked_is_caught(
    make_task: TaskFactory, cheats: Path, tmp_path: Path, reader: str
) -> None:
    """A forked child has spent little CPU time for a process with torch loaded: a trojan that reads
    its CPU time to tell the zygote's fork from a production process, and behaves only then, is
    rejected by the static gate, and at runtime (gate advisory) the read is a tripwire. Without the
    tripwires it passed: it computes honestly in every forked child."""
    source = (cheats / "fork_aware.py").read_text()
    source = source.replace("time.process_time()  # READER", CPU_TIME_READERS[reader])
    line = next(n for n, text in enumerate(source.splitlines(), 1) if CPU_TIME_READERS[reader] in text)
    assert line in {v.line for v in check_source(source, "add", dtypes=["float32"]).violations}
    candidate = tmp_path / "candidate" / "fork_aware.py"
    candidate.parent.mkdir()
    candidate.write_text(source)
    result = verify(make_task("add", dtypes=["float32"], layouts={}), candidate, enforce_static=False)
    assert result.verdict == "fail", summary(result)
    assert Flag.MONITOR_TAMPERED in result.flags, summary(result)


@pytest.mark.slow
@pytest.mark.skipif(
    os.geteuid() == 0 and shutil.which("setpriv") is None, reason="as root, drops CAP_SYS_PTRACE with setpriv"
)
def test_a_child_without_cap_sys_ptrace_cannot_read_the_zygotes_or_the_harnesss_memory(
    make_task: TaskFactory, tmp_path: Path
) -> None:
    """The candidate runs with the harness's uid. Without Yama a same-uid process may read another's
    memory through /proc/<pid>/mem, and the harness holds the references: the CLI (the parent) and the
    zygote make themselves non-dumpable, so the child -- dumpable again, its own memory readable, the
    control -- is refused both. The CLI runs without CAP_SYS_PTRACE (the job sandbox's case: with it,
    root reads any memory); without the prctl calls the probe read both."""
    task = make_task("add", dtypes=["float32"], layouts={})
    seen_path, out = tmp_path / "seen.json", tmp_path / "result.json"
    probe = _probe("ancestor_memory.py", tmp_path / "probe", seen_path, NEEDLES=json.dumps(_needles(task)))
    cli = [sys.executable, "-P", "-s", "-m", "orchestrator.verify", "--task", str(task)]
    cli += ["--candidate", str(probe), "--pool", "cpu", "--out", str(out)]
    cli += ["--static-advisory", "--seeds", ",".join(map(str, SEEDS))]
    # Another uid has no CAP_SYS_PTRACE to begin with; root gives it up for the run.
    drop = ["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace"] if os.geteuid() == 0 else []
    done = subprocess.run(drop + cli, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert seen_path.exists(), (done.returncode, done.stderr[-2000:])
    seen = json.loads(seen_path.read_text())
    assert seen["self"].startswith("read:") and seen["self"] != "read: 0 found", seen  # the search works
    assert seen["zygote"].startswith("refused"), seen
    assert seen["harness"].startswith("refused"), seen
    assert json.loads(out.read_text())["child"]["completed"], done.stderr[-2000:]


def test_a_report_for_a_trial_that_is_not_running_is_a_forgery() -> None:
    """The parent sends trial k+1 once trial k was reported: a report about any other trial (one never
    sent, or one already reported) would only pull the next plans early, and is a stream error."""

    def trial(index: int) -> bytes:
        return json.dumps({"event": "trial", "index": index, "calls": []}).encode()

    builder = ReportBuilder(order=[3, 0, 7])
    builder.feed(JSON, json.dumps({"event": "import"}).encode())
    builder.feed(JSON, trial(3))
    builder.feed(JSON, trial(0))
    assert builder.report.stream_error is None and builder.progress == 3
    builder.feed(JSON, trial(-1))
    assert builder.report.stream_error == "a report for trial -1, not the one sent"
    late = ReportBuilder(order=[0])
    late.feed(JSON, trial(0))
    late.feed(JSON, trial(1))  # one more than was sent
    assert late.report.stream_error == "a report for trial 1, not the one sent"


@pytest.mark.slow
def test_a_candidate_that_forges_reports_to_pull_the_plans_early_is_caught(
    make_task: TaskFactory, cheats: Path
) -> None:
    task = make_task("add", dtypes=["float32"], layouts={})
    result = verify(task, cheats / "plan_puller.py", enforce_static=False)
    assert result.verdict == "fail", summary(result)
    assert Flag.MONITOR_TAMPERED in result.flags, summary(result)
    assert any("not the one sent" in r for r in result.reasons), result.reasons


def test_the_zygote_shares_no_writable_memory_and_runs_one_thread() -> None:
    """What a child could write into and the next child read: a writable shared mapping (MAP_SHARED)
    of the zygote survives copy-on-write. There is none; and the zygote forks with one thread only (a
    thread in a forking process leaves its locks held in every child)."""
    with ForkServer(interpret=True) as server:
        server.start()
        zygote = server._zygote
        assert zygote is not None
        while not zygote.ready:
            try:
                zygote.receive(time.monotonic() + 1)
            except TimeoutError:
                continue
        pid = zygote.proc.pid
        maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
        status = Path(f"/proc/{pid}/status").read_text()
    writable_shared = [m for m in maps if m.split()[1][1] == "w" and m.split()[1][3] == "s"]
    assert maps and writable_shared == [], writable_shared
    assert "\nThreads:\t1\n" in status


def test_the_zygote_drops_the_tree_but_keeps_a_venv_under_a_dir_named_like_the_project() -> None:
    """A clone in ``~/kswarm`` with its venv in ``~/kswarm/.venv``: torch must stay importable (a
    substring filter on the project's name dropped that site-packages and every job failed), while the
    project root and the editable install's path hook go."""
    from orchestrator.verify.forkserver import PROJECT_ROOT, tree_free_path

    site = "/home/u/kswarm/.venv/lib/python3.11/site-packages"
    paths = ["/usr/lib/python3.11", site, "__editable__.kswarm-0.1.0.finder.__path_hook__", str(PROJECT_ROOT)]
    assert tree_free_path(paths, [str(PROJECT_ROOT)], "kswarm") == ["/usr/lib/python3.11", site]


def test_a_tree_installed_beside_torch_is_refused_with_how_to_install_it(tmp_path: Path) -> None:
    """The zygote leaves the tree's root off the candidates' sys.path: a root that is a site-packages
    dir (kswarm installed there as plain packages, as a worker image once did) would take torch with it,
    and every job failed with "No module named 'torch'". It is refused saying how to install instead."""
    from orchestrator.verify.forkserver import PROJECT_ROOT, shared_root

    site = tmp_path / "lib" / "python3.11" / "site-packages"
    for package in ("orchestrator", "torch"):
        (site / package).mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")
    beside_numpy = tmp_path / "opt"
    (beside_numpy / "orchestrator").mkdir(parents=True)
    (beside_numpy / "numpy-2.1.0.dist-info").mkdir()
    for root in (site, beside_numpy):
        why = shared_root(root)
        assert why is not None and "beside other packages" in why and "--target" in why
    own = tmp_path / "kswarm-code"
    (own / "orchestrator").mkdir(parents=True)
    (own / "kswarm-0.1.0.dist-info").mkdir()
    assert shared_root(own) is None  # pip install --target DIR + a .pth (the worker images)
    named = tmp_path / "site-packages"  # a checkout in a dir of that name, with a stray torch/ folder
    (named / "orchestrator").mkdir(parents=True)
    (named / "torch").mkdir()
    assert shared_root(named) is None
    assert shared_root(PROJECT_ROOT) is None  # this checkout


def test_why_a_child_died_reaches_the_jobs_log_without_its_control_characters(
    make_task: TaskFactory, tmp_path: Path
) -> None:
    """A child that dies at import (as a missing module would make it) leaves its stderr's tail in the
    CLI's stderr, which is the job's log; the candidate's escape sequences arrive neutralised."""
    task = make_task("add", dtypes=["float32"], layouts={})
    dying = tmp_path / "dying.py"
    dying.write_text(
        "import os, sys\n"
        "sys.stderr.write('\\x1b[2J\\x1b]0;owned\\x07ModuleNotFoundError: No module named nosuchmod\\n')\n"
        "sys.stderr.flush()\n"
        "os._exit(1)\n"
    )
    cli = [sys.executable, "-P", "-s", "-m", "orchestrator.verify", "--task", str(task)]
    cli += ["--candidate", str(dying), "--pool", "cpu", "--static-advisory"]
    cli += ["--out", str(tmp_path / "r.json")]
    done = subprocess.run(cli, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "No module named nosuchmod" in done.stderr, done.stderr[-2000:]
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr
