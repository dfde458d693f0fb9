"""One suite for both implementations of the ``Sandbox`` protocol (bubblewrap, kswarm's own namespaces).

Each test runs an attacker's script as the sandboxed command through ``python -m orchestrator.sandbox``
(the job executor's way in), with ``KSWARM_SANDBOX`` naming the implementation, as root (the command
runs as ``nobody``) and as an unprivileged caller (``setpriv`` to ``nobody``: a user namespace), and
judges on the host. The command is the system Python (under ``/usr``), so that both implementations can
build the same root in both cases (bubblewrap, run by root, runs as the command's uid).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.runtime.base import project_root
from orchestrator.sandbox.bubblewrap import BubblewrapSandbox, bwrap_args, filter_bytes
from orchestrator.sandbox.plan import SETUP_FAILED, SandboxPlan
from orchestrator.sandbox.protocol import Sandbox
from orchestrator.sandbox.spawn import IMPLEMENTATIONS, choose_sandbox

NOBODY = 65534
SYSTEM_PYTHON = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (to be nobody, and to be root)"),
    pytest.mark.skipif(not Path(SYSTEM_PYTHON).exists(), reason=f"no {SYSTEM_PYTHON} for the command"),
]

ATTACK = r"""
import ctypes, json, os, socket, sys
report = {}
def attempt(name, fn):
    try:
        report[name] = "OK " + str(fn())
    except Exception as exc:
        report[name] = f"refused: {type(exc).__name__}: {exc}"
args = json.loads(sys.argv[1])
attempt("write_host_tmp", lambda: open("/tmp/" + args["marker"] + "-from-sandbox", "w").write("x"))
attempt("see_host_tmp_marker", lambda: os.path.exists("/tmp/" + args["marker"]) or 1 / 0)
attempt("read_outside_secret", lambda: open(args["secret"]).read())
attempt("read_hidden", lambda: open(args["hidden"]).read())
attempt("write_read_only_bind", lambda: open(args["ro_dir"] + "/pwned", "w").write("x"))
attempt("write_own_dir", lambda: open(args["rw_dir"] + "/mine", "w").write("x"))
attempt("tcp_to_host", lambda: socket.create_connection(("127.0.0.1", args["port"]), 2))
attempt("interfaces", lambda: sorted(n for _, n in socket.if_nameindex()))
libc = ctypes.CDLL(None, use_errno=True)
def syscall(rc):
    if rc != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return rc
attempt("ptrace", lambda: syscall(libc.ptrace(0, 0, None, None)))
attempt("unshare_user", lambda: syscall(libc.unshare(0x10000000)))
attempt("unshare_net", lambda: syscall(libc.unshare(0x40000000)))
attempt("mount_tmpfs", lambda: syscall(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)))
attempt("keyctl", lambda: syscall(libc.syscall(250, 0, 0, 0, 0)))
attempt("bpf", lambda: syscall(libc.syscall(321, 0, 0, 0)))
attempt("perf_event_open", lambda: syscall(libc.syscall(298, 0, 0, -1, -1, 0)))
attempt("cgroup_kill", lambda: [open(os.path.join(d, "cgroup.kill"), "w").write("1")
                                for d, _, f in os.walk("/sys/fs/cgroup") if "cgroup.kill" in f] or 1 / 0)
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
report["uid"] = os.getuid()
report["caps"] = status["CapEff"].strip()
report["no_new_privs"] = status["NoNewPrivs"].strip()
report["pids_visible"] = len([p for p in os.listdir("/proc") if p.isdigit()])
report["root_entries"] = sorted(os.listdir("/"))
print("REPORT " + json.dumps(report), flush=True)
"""


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def implementation(request: pytest.FixtureRequest) -> str:
    if request.param == "bubblewrap" and BubblewrapSandbox().unavailable():
        pytest.skip(f"not tested with bubblewrap: {BubblewrapSandbox().unavailable()}")
    return request.param


@pytest.fixture(params=["root", "unprivileged"])
def caller(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def stage(short_tmp: Path) -> Iterator[dict[str, str]]:
    """What the attacker aims at: a marker in the host's /tmp, a secret beside the sandbox's dirs, a
    hidden dir inside a read-only bind, a loopback listener."""
    short_tmp.chmod(0o755)
    marker = f"kswarm-sandbox-suite-{os.getpid()}-{time.monotonic_ns()}"
    Path("/tmp", marker).write_text("host tmp")
    (short_tmp / "secret.txt").write_text("ksw_outside_secret")
    (short_tmp / "secret.txt").chmod(0o644)
    ro_dir, rw_dir = short_tmp / "ro", short_tmp / "rw"
    (ro_dir / "hidden").mkdir(parents=True)
    (ro_dir / "hidden" / "token").write_text("ksw_hidden_token")
    rw_dir.mkdir()
    for path in (ro_dir, ro_dir / "hidden", ro_dir / "hidden" / "token", rw_dir):
        os.chown(path, NOBODY, NOBODY)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    yield {
        "marker": marker,
        "secret": str(short_tmp / "secret.txt"),
        "ro_dir": str(ro_dir),
        "rw_dir": str(rw_dir),
        "hidden": str(ro_dir / "hidden" / "token"),
        "port": listener.getsockname()[1],  # type: ignore[dict-item]
    }
    listener.close()
    Path("/tmp", marker).unlink(missing_ok=True)
    Path("/tmp", marker + "-from-sandbox").unlink(missing_ok=True)


def site_packages() -> str:
    import pydantic

    return str(Path(pydantic.__file__).resolve().parents[1])


def launch(plan: SandboxPlan, implementation: str, caller: str) -> subprocess.Popen[str]:
    """``python -m orchestrator.sandbox PLAN`` as the job executor starts it (its own session)."""
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{project_root()}{os.pathsep}{site_packages()}",
        "KSWARM_SANDBOX": implementation,
    }
    prefix = (
        [] if caller == "root" else ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    )
    python = sys.executable if caller == "root" else SYSTEM_PYTHON
    return subprocess.Popen(
        [*prefix, python, "-m", "orchestrator.sandbox", plan.model_dump_json()],
        env=env,
        cwd="/",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def attack_plan(stage: dict[str, str], caller: str, argv: list[str] | None = None) -> SandboxPlan:
    return SandboxPlan(
        argv=argv or [SYSTEM_PYTHON, "-c", ATTACK, json.dumps(stage)],
        env={"PATH": "/usr/bin:/bin"},
        cwd=stage["rw_dir"],
        ro=[stage["ro_dir"]],
        rw=[stage["rw_dir"]],
        hide=[str(Path(stage["ro_dir"]) / "hidden")],
        run_as=NOBODY if caller == "root" else None,
        loopback=False,
        pids=64,
        rlimits={"nofile": 256},
    )


def test_the_attacker_meets_every_wall(stage: dict[str, str], implementation: str, caller: str) -> None:
    proc = launch(attack_plan(stage, caller), implementation, caller)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    report = json.loads(out.split("REPORT ", 1)[1])

    # /tmp is its own tmpfs: the write succeeds there, and nothing lands in the host's /tmp.
    assert not Path("/tmp", stage["marker"] + "-from-sandbox").exists()
    for name in (
        "see_host_tmp_marker",
        "read_outside_secret",
        "read_hidden",
        "write_read_only_bind",
        "tcp_to_host",
        "ptrace",
        "unshare_user",
        "unshare_net",
        "mount_tmpfs",
        "keyctl",
        "bpf",
        "perf_event_open",
        "cgroup_kill",
    ):
        assert report[name].startswith("refused"), (name, report[name])
    assert not Path("/tmp", stage["marker"] + "-from-sandbox").exists()
    for name in ("ptrace", "unshare_user", "unshare_net", "mount_tmpfs", "keyctl", "bpf"):
        assert "Operation not permitted" in report[name], (name, report[name])  # the seccomp filter
    assert report["write_own_dir"].startswith("OK") and (Path(stage["rw_dir"]) / "mine").exists()
    assert report["interfaces"] in ("OK ['lo']", "OK []"), report["interfaces"]  # no host interface
    assert report["uid"] == NOBODY and report["caps"] == "0000000000000000" and report["no_new_privs"] == "1"
    assert report["pids_visible"] < 6  # its own pid namespace
    assert "root" not in report["root_entries"] and "work" not in report["root_entries"]


def test_the_implementation_asked_for_is_the_one_that_runs(
    stage: dict[str, str], implementation: str, caller: str
) -> None:
    proc = launch(
        attack_plan(stage, caller, [SYSTEM_PYTHON, "-c", "import time; time.sleep(30)"]),
        implementation,
        caller,
    )
    try:
        deadline = time.monotonic() + 20
        tree: list[int] = []
        while time.monotonic() < deadline and len(tree) < 3:
            tree = descendants(proc.pid)
            time.sleep(0.05)
        programs = {Path(f"/proc/{p}/exe").resolve().name for p in tree if Path(f"/proc/{p}").exists()}
        assert ("bwrap" in programs) == (implementation == "bubblewrap"), programs
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)


def descendants(pid: int) -> list[int]:
    out = [pid]
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for kid in kids:
        out += descendants(int(kid))
    return out


def test_kill_9_of_the_launcher_takes_everything_down(
    stage: dict[str, str], implementation: str, caller: str
) -> None:
    """A setsid'd, double-forked child tries to outlive the sandbox."""
    flee = (
        "import os, subprocess, sys, time\n"
        "subprocess.Popen(['setsid', 'sh', '-c', 'sleep 300 & sleep 300'])\n"
        f"open('{stage['rw_dir']}/ready', 'w').write('1')\n"
        "time.sleep(300)\n"
    )
    proc = launch(attack_plan(stage, caller, [SYSTEM_PYTHON, "-c", flee]), implementation, caller)
    ready = Path(stage["rw_dir"]) / "ready"
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.3)
    tree = descendants(proc.pid)
    assert len(tree) >= 4, tree
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and [p for p in tree if alive(p)]:
        time.sleep(0.1)
    assert [p for p in tree if alive(p)] == []


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def test_sigterm_reaches_the_command(stage: dict[str, str], implementation: str, caller: str) -> None:
    graceful = (
        "import os, signal, time\n"
        "def bye(*_):\n    open(os.environ['TERM_FILE'], 'w').write('bye')\n    os._exit(7)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        f"open('{stage['rw_dir']}/ready', 'w').write('1')\n"
        "time.sleep(60)\n"
    )
    plan = attack_plan(stage, caller, [SYSTEM_PYTHON, "-c", graceful])
    plan.env["TERM_FILE"] = f"{stage['rw_dir']}/term"
    proc = launch(plan, implementation, caller)
    ready = Path(stage["rw_dir"]) / "ready"
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)  # as a runtime's stop does: the launcher's whole group
    proc.communicate(timeout=30)
    assert (Path(stage["rw_dir"]) / "term").read_text() == "bye"
    assert proc.returncode == 7


def test_a_sandbox_that_cannot_be_built_says_why_and_runs_nothing(
    stage: dict[str, str], implementation: str, caller: str
) -> None:
    plan = attack_plan(stage, caller, [SYSTEM_PYTHON, "-c", f"open('{stage['rw_dir']}/ran', 'w')"])
    plan = plan.model_copy(update={"ro": [*plan.ro, "/nonexistent/kswarm-needed"]})
    proc = launch(plan, implementation, caller)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == SETUP_FAILED, err
    lines = [line for line in err.splitlines() if line.startswith("kswarm sandbox: ")]
    assert lines and "/nonexistent/kswarm-needed" in lines[-1], err
    assert not (Path(stage["rw_dir"]) / "ran").exists()


def test_the_command_exit_status_is_its_own(stage: dict[str, str], implementation: str, caller: str) -> None:
    """A command exiting 1 is not a sandbox failure (bubblewrap exits 1 for both: told apart here)."""
    plan = attack_plan(stage, caller, [SYSTEM_PYTHON, "-c", "import sys; print('ran'); sys.exit(1)"])
    proc = launch(plan, implementation, caller)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and out.strip() == "ran", err
    assert "kswarm sandbox" not in err


# -- the protocol and the choice ------------------------------------------------------------------


def test_both_implementations_are_sandboxes() -> None:
    for cls in IMPLEMENTATIONS.values():
        assert isinstance(cls(), Sandbox)


def test_the_choice_follows_kswarm_sandbox_and_refuses_a_typo() -> None:
    assert choose_sandbox({"KSWARM_SANDBOX": "namespaces"}).name == "namespaces"
    assert choose_sandbox({"KSWARM_SANDBOX": "bubblewrap"}).name == "bubblewrap"
    with pytest.raises(OSError, match="choose auto, bubblewrap or namespaces"):
        choose_sandbox({"KSWARM_SANDBOX": "bwarp"})


def test_as_root_bubblewrap_is_chosen_only_where_the_jobs_uid_reaches_every_path(short_tmp: Path) -> None:
    if BubblewrapSandbox().unavailable():
        pytest.skip(str(BubblewrapSandbox().unavailable()))
    locked = short_tmp / "locked"
    (locked / "inner").mkdir(parents=True)
    locked.chmod(0o700)
    open_dir = short_tmp / "open"
    open_dir.mkdir()
    short_tmp.chmod(0o755)
    base = {"argv": [SYSTEM_PYTHON], "env": {}, "cwd": "/", "run_as": NOBODY}
    reachable = SandboxPlan(**base, ro=[str(open_dir)])  # type: ignore[arg-type]
    unreachable = SandboxPlan(**base, ro=[str(locked / "inner")])  # type: ignore[arg-type]
    assert choose_sandbox({}, reachable).name == "bubblewrap"
    assert choose_sandbox({}, unreachable).name == "namespaces"


def test_bwrap_gets_this_packages_filter_and_no_way_to_new_user_namespaces(stage: dict[str, str]) -> None:
    args = bwrap_args(attack_plan(stage, "root"), 10, 11)
    assert args[args.index("--seccomp") + 1] == "10" and "--disable-userns" in args
    assert {"--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--die-with-parent"} <= set(
        args
    )
    assert len(filter_bytes()) % 8 == 0 and len(filter_bytes()) > 30 * 8
