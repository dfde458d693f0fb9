"""A malicious kernel's job attacks the host from inside the local executor's sandbox.

The job's "harness" is an attacker script (the candidate file itself, run with the job's Python: what
a kernel that slipped past the static gate would execute at import). A driver plays the worker: it lays
out a work dir with two jobs (ours and a victim ``jB`` whose result is not yet read), a gateway-like
unix socket, a listening loopback port and a file of the worker's own (its token), installs a SIGUSR1
counter, runs the attacker through ``LocalExecutor`` and reports what happened on the host. The
driver runs as root (the job then runs as ``nobody``) and as an unprivileged user (the job runs as
that same user, in user namespaces): both must hold. This test judges the host side, not the job's
own claims.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.runtime.base import project_root
from orchestrator.worker.executors.local import make_writable

NOBODY = 65534
pytestmark = [
    pytest.mark.skipif(
        os.geteuid() != 0, reason="the driver needs root (and to become an unprivileged user)"
    ),
    pytest.mark.slow,
]

ATTACKER = r"""
import ctypes, json, os, signal, socket, subprocess, sys
from pathlib import Path

t = json.loads(sys.argv[1])
token, report = t["token"], {}


def attempt(name, action):
    try:
        report[name] = "ok: " + str(action())[:2000]
    except Exception as exc:
        report[name] = f"refused: {type(exc).__name__}: {exc}"


def drop(path):
    Path(path).write_text("pwned " + token)
    return path


def connect_unix(path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return "connected"


def own_checkout():
    kernel = Path(t["own_src"]) / "kernel.py"
    for p, mode in ((Path(t["own_src"]), 0o755), (kernel, 0o644)):
        try:
            os.chmod(p, mode)
        except OSError:
            pass
    kernel.write_text("overwritten " + token)
    return "written"


for d in ("/tmp", "/var/tmp", "/run/lock", "/dev/shm"):
    attempt("write " + d, lambda d=d: drop(f"{d}/ks-attack-{token}"))
attempt("list /tmp", lambda: json.dumps(sorted(os.listdir("/tmp"))))
attempt("read other out", lambda: Path(t["other_out"], "result.json").read_text())
attempt("write other out", lambda: drop(f"{t['other_out']}/result.json"))
attempt("read other checkout", lambda: Path(t["other_src"], "kernel.py").read_text())
attempt("list workdir", lambda: json.dumps(sorted(os.listdir(t["workdir"]))))
attempt("write own checkout", own_checkout)
attempt("write worker state", lambda: drop(t["worker_token"]))
attempt("read worker state", lambda: Path(t["worker_token"]).read_text())
attempt("tcp loopback", lambda: socket.create_connection(("127.0.0.1", t["port"]), 2) and "connected")
attempt("gateway socket", lambda: connect_unix(t["socket"]))
attempt("abstract socket", lambda: connect_unix("\0" + t["abstract"]))
attempt("signal worker", lambda: os.kill(t["worker_pid"], signal.SIGUSR1) or "sent")
attempt("worker environ", lambda: Path(f"/proc/{t['worker_pid']}/environ").read_bytes())
attempt("parent environ", lambda: Path(f"/proc/{os.getppid()}/environ").read_bytes())

# Syscalls the sandbox's walls rest on: each must be refused by the filter (EPERM), whatever the
# kernel would have said to an unprivileged user.
libc = ctypes.CDLL(None, use_errno=True)


def errno_of(rc):
    return "ok" if rc >= 0 else f"errno {ctypes.get_errno()}"


def clone_into_new_namespaces():
    pid = libc.syscall(56, 0x10000000 | 0x40000000 | signal.SIGCHLD, 0, 0, 0, 0)  # NEWUSER | NEWNET
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
    return errno_of(pid)


report["syscalls"] = {
    "ptrace": errno_of(libc.ptrace(0, 0, 0, 0)),  # PTRACE_TRACEME
    "unshare": errno_of(libc.unshare(0x10000000)),  # CLONE_NEWUSER
    "clone": clone_into_new_namespaces(),
    "keyctl": errno_of(libc.syscall(250, 0, -3, 0)),  # KEYCTL_GET_KEYRING_ID of the session keyring
    "perf_event_open": errno_of(libc.syscall(298, ctypes.create_string_buffer(128), 0, -1, -1, 0)),
    "x32_getpid": errno_of(libc.syscall(0x40000000 | 39)),
    "mount": errno_of(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
}

# Anywhere else on the host: every directory it may write to. The shared tmp trees are only walked
# along the way to this test's own dir (other users' files are none of this test's business).
shared = ("/tmp", "/var/tmp", "/dev/shm", "/run")
base = t["base"]


def on_the_way(path):
    return base == path or base.startswith(path + "/") or path.startswith(base + "/")


written = []
for root, dirs, _ in os.walk("/"):
    if root in ("/proc", "/sys"):
        dirs[:] = []
        continue
    if any(root == s or root.startswith(s + "/") for s in shared):
        dirs[:] = [d for d in dirs if on_the_way(os.path.join(root, d))]
    if os.access(root, os.W_OK):
        try:
            Path(root, f"ks-attack-{token}").write_text(token)
            written.append(root)
        except OSError:
            pass
report["written"] = written

# Outlive the job: a new session, detached from everything.
subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(300)", f"ks-leftover-{token}"],
    start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
Path(t["own_out"], "report.json").write_text(json.dumps(report))
# Last: the worker reads result.json once the job is gone -- as root, through a planted link?
os.symlink(t["worker_record"], Path(t["own_out"], "result.json"))
print("attacker done", flush=True)
"""

DRIVER = r"""
import asyncio, json, os, secrets, signal, socket, sys, time
from pathlib import Path
from orchestrator.worker.executors.base import ExecSpec, job_env
from orchestrator.worker.executors.local import LocalExecutor
from gateway.client.jobs.pools import JobLimits

base, attacker, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
token = secrets.token_hex(6)
signals = []
signal.signal(signal.SIGUSR1, lambda *_: signals.append(1))
workdir = base / "workers"
workdir.mkdir()
workdir.chmod(0o711)  # what the worker does: jobs may run as another uid
state = base / "worker-state"
state.mkdir()
(state / "token").write_text("ksw_worker_secret")
(state / "token").chmod(0o600)
(state / "record.json").write_text('{"verdict": "pass", "secret": "ksw_worker_record"}')
(state / "record.json").chmod(0o600)
abstract = f"ks-abstract-{token}"
hidden_door = socket.socket(socket.AF_UNIX)
hidden_door.bind("\0" + abstract)
hidden_door.listen()
shared = base / "shared"  # a world-writable dir elsewhere on the host
shared.mkdir()
shared.chmod(0o1777)
run = base / "run"
run.mkdir()
door = socket.socket(socket.AF_UNIX)
door.bind(str(run / "gateway.sock"))
os.chmod(run / "gateway.sock", 0o666)  # as the gateway's: the token, not the mode, is its gate
door.listen()
tcp = socket.socket()
tcp.bind(("127.0.0.1", 0))
tcp.listen()


def job_dirs(name, kernel):
    src, out = workdir / f"{name}-1" / "src", workdir / f"{name}-1" / "out"
    src.mkdir(parents=True)
    out.mkdir()
    (src / "kernel.py").write_text(kernel)
    return src, out


def spec(name, src, out, argv):
    env = job_env(out, {"PYTHONPATH": os.environ["PYTHONPATH"]})
    return ExecSpec(job_id=name, attempt=1, argv=argv, checkout=src, outdir=out, env=env, timeout_s=120,
                    limits=JobLimits())


src_a, out_a = job_dirs("jA", attacker)
src_b, out_b = job_dirs("jB", "# the victim's kernel: ksw_b_kernel\n")
(out_b / "result.json").write_text('{"verdict": "fail", "note": "ksw_b_result"}')
executor = LocalExecutor()
executor.prepare(spec("jB", src_b, out_b, ["true"]))  # as for a job that is running right now
targets = {
    "token": token, "base": str(base), "workdir": str(workdir), "own_src": str(src_a),
    "own_out": str(out_a), "other_src": str(src_b), "other_out": str(out_b),
    "worker_token": str(state / "token"), "port": tcp.getsockname()[1],
    "socket": str(run / "gateway.sock"), "worker_pid": os.getpid(), "abstract": abstract,
    "worker_record": str(state / "record.json"),
}
argv = [sys.executable, "-P", "-s", str(src_a / "kernel.py"), json.dumps(targets)]


# The worker's warm start: the sandbox started over empty dirs, the job's files written into them
# after, its arguments handed over on stdin (a launcher stands in for the harness's --warm).
async def warm_run():
    kernel = (src_a / "kernel.py").read_text()
    (src_a / "kernel.py").unlink()
    launcher = "import json, runpy, sys; sys.argv = json.loads(input()); runpy.run_path(sys.argv[0])"
    warm = spec("jA", src_a, out_a, [sys.executable, "-P", "-s", "-c", launcher])
    started = await executor.prestart(warm)
    assert started is not None
    (src_a / "kernel.py").write_text(kernel)
    return await executor.run_prestarted(started, warm, argv[3:], asyncio.Event())


if mode == "warm":
    outcome = asyncio.run(warm_run())
else:
    outcome = asyncio.run(executor.run(spec("jA", src_a, out_a, argv), asyncio.Event()))


def host_has(path):
    return os.path.lexists(path)


def marked() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"ks-leftover-{token}".encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


# A process the kernel is still tearing down (killed with the job's pid namespace, not yet reaped) is
# on its way out under a loaded machine; one that outlives the job stays. Bounded wait for the first.
leftovers = marked()
deadline = time.monotonic() + 15
while leftovers and time.monotonic() < deadline:
    time.sleep(0.1)
    leftovers = marked()
for pid in leftovers:  # the judge's clean-up: an attack that worked must not linger
    os.kill(pid, signal.SIGKILL)
report = json.loads((out_a / "report.json").read_text()) if (out_a / "report.json").exists() else None
dropped = {d: host_has(f"{d}/ks-attack-{token}") for d in ("/tmp", "/var/tmp", "/run/lock", "/dev/shm")}
host_written = [d for d in (report or {}).get("written", []) if host_has(f"{d}/ks-attack-{token}")]
for d in [*dropped, *host_written]:
    try:
        os.unlink(f"{d}/ks-attack-{token}")
    except OSError:
        pass
print(json.dumps({
    "uid": os.getuid(),
    "token": token,
    "outcome": {"rc": outcome.returncode, "error": outcome.error, "isolation": outcome.isolation,
                "output": outcome.output},
    "report": report,
    "signals": len(signals),
    "leftovers": leftovers,
    "dropped": dropped,
    "host_written": host_written,
    "own_out": str(out_a),
    "own_kernel": (src_a / "kernel.py").read_text(),
    "attacker": attacker,
    "other_result": (out_b / "result.json").read_text(),
    "worker_token": (state / "token").read_text(),
    "shared": os.listdir(shared),
    "result_is_link": os.path.islink(out_a / "result.json"),
    "result_read": (out_a / "result.json").read_text() if (out_a / "result.json").exists() else None,
}))
"""


def interpreter_for_nobody() -> tuple[str, str]:
    """A Python ``nobody`` can run with this environment's packages: ours, or the system's of the same
    version with our site-packages on the path (a pyenv Python under /root is out of its reach)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        probe = subprocess.run(
            # Through sh: setpriv's own exec finds a way that the job's execve would not.
            [
                "setpriv",
                f"--reuid={NOBODY}",
                f"--regid={NOBODY}",
                "--clear-groups",
                "sh",
                "-c",
                f"{candidate} -V",
            ],
            capture_output=True,
        )
        if probe.returncode == 0:
            return candidate, os.pathsep.join(site.getsitepackages())
    pytest.skip(f"no {version} that an unprivileged user can run")


def drive(base: Path, as_user: int | None, mode: str = "cold") -> dict:
    """Run the driver (the worker's part) as root or as ``as_user``; returns its report."""
    base.chmod(0o755)
    if as_user is None:
        python, path = sys.executable, str(project_root())
        prefix: list[str] = []
    else:
        os.chown(base, as_user, as_user)
        python, site_packages = interpreter_for_nobody()
        path = f"{project_root()}{os.pathsep}{site_packages}"
        prefix = ["setpriv", f"--reuid={as_user}", f"--regid={as_user}", "--clear-groups"]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": path, "KSWARM_SECRET_PROBE": "do-not-leak"}
    done = subprocess.run(
        [*prefix, python, "-c", DRIVER, str(base), ATTACKER, mode],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=["root-cold", "unprivileged-cold", "root-warm", "unprivileged-warm"])
def attacked(request: pytest.FixtureRequest) -> Iterator[dict]:
    """Each attack as a cold start (the sandbox built for the job) and as a warm start (built before
    it, the job's files written in after and its arguments handed over: orchestrator/worker/warm.py)."""
    who, mode = request.param.split("-")
    base = Path(tempfile.mkdtemp(prefix=f"ksjsb-{request.param}-"))  # not under a 0700 pytest dir
    try:
        yield drive(base, None if who == "root" else NOBODY, mode)
    finally:
        make_writable(base)
        shutil.rmtree(base, ignore_errors=True)


def refused(report: dict, name: str) -> None:
    assert report[name].startswith("refused"), f"{name}: {report[name]}"


def test_the_attacker_ran_to_the_end_in_a_sandbox(attacked: dict) -> None:
    outcome = attacked["outcome"]
    assert outcome["rc"] == 0 and outcome["error"] is None, outcome
    assert attacked["report"] is not None, outcome["output"][-2000:]
    # The log's first line lists the protections in effect.
    header = outcome["output"].splitlines()[0]
    assert header.startswith("[kswarm] sandbox: "), outcome["output"][:500]
    for protection in ("mount namespace", "network: namespace", "pid namespace", "seccomp"):
        assert protection in header, header
    assert any(note.startswith("network: namespace") for note in outcome["isolation"])


def test_job_cannot_write_the_hosts_shared_tmp_dirs(attacked: dict) -> None:
    assert attacked["dropped"] == {d: False for d in ("/tmp", "/var/tmp", "/run/lock", "/dev/shm")}


def test_job_cannot_list_the_hosts_tmp(attacked: dict) -> None:
    listing = attacked["report"]["list /tmp"]
    assert listing.startswith("ok: "), listing  # its own /tmp: what it dropped there, and its path
    seen = set(json.loads(listing.removeprefix("ok: ")))
    own = {Path(attacked["own_out"]).parts[2], f"ks-attack-{attacked['token']}"}
    # What the sandbox binds read-only from the host shows at its own path: the interpreter and the
    # kswarm tree, which live under /tmp when the checkout does (a fresh clone there).
    bound = (Path(__file__).resolve().parents[3], Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve())
    own |= {p.parts[2] for p in bound if len(p.parts) > 2 and p.parts[1] == "tmp"}
    assert seen <= own, f"the host's /tmp shows through: {sorted(seen - own)[:10]}"


def test_job_cannot_reach_another_jobs_dirs(attacked: dict) -> None:
    report = attacked["report"]
    for name in ("read other out", "write other out", "read other checkout"):
        refused(report, name)
    assert "jB-1" not in report["list workdir"]  # its own dir is on its way; no other job's is there
    assert "ksw_b" not in json.dumps(report)
    assert attacked["other_result"] == '{"verdict": "fail", "note": "ksw_b_result"}'


def test_job_cannot_write_its_own_checkout(attacked: dict) -> None:
    refused(attacked["report"], "write own checkout")
    assert attacked["own_kernel"] == attacked["attacker"]


def test_job_cannot_touch_the_workers_files_or_write_anywhere_on_the_host(attacked: dict) -> None:
    report = attacked["report"]
    refused(report, "read worker state")
    refused(report, "write worker state")
    assert attacked["worker_token"] == "ksw_worker_secret"
    assert attacked["shared"] == []
    own = attacked["own_out"]
    elsewhere = [d for d in attacked["host_written"] if not (d == own or d.startswith(own + "/"))]
    assert elsewhere == []


def test_job_has_no_network_and_no_gateway_socket(attacked: dict) -> None:
    refused(attacked["report"], "tcp loopback")
    refused(attacked["report"], "gateway socket")
    refused(attacked["report"], "abstract socket")


def test_a_result_record_planted_as_a_link_is_not_followed(attacked: dict) -> None:
    """The worker reads result.json after the job: a link to a file of the worker's must be gone."""
    assert attacked["result_is_link"] is False
    assert attacked["result_read"] is None or "ksw_worker_record" not in attacked["result_read"]


def test_job_cannot_signal_the_worker_or_read_its_environment(attacked: dict) -> None:
    report = attacked["report"]
    refused(report, "signal worker")
    assert attacked["signals"] == 0
    refused(report, "worker environ")
    assert "do-not-leak" not in json.dumps(report)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the attacker calls x86_64 syscall numbers")
def test_job_cannot_ptrace_mount_or_make_namespaces(attacked: dict) -> None:
    """The seccomp filter: denied with EPERM (no namespace of its own, no tracing, no keyrings...)."""
    assert attacked["report"]["syscalls"] == {
        name: "errno 1"
        for name in ("ptrace", "unshare", "clone", "keyctl", "perf_event_open", "x32_getpid", "mount")
    }


def test_no_process_of_the_job_outlives_it(attacked: dict) -> None:
    assert attacked["leftovers"] == []


SLEEPER = r"""
import subprocess, sys, time
from pathlib import Path
out, token = Path(sys.argv[1]), sys.argv[2]
for _ in range(2):  # one in the job's session, one in a session of its own
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", f"ks-orphan-{token}"],
                     start_new_session=True)
(out / "started").write_text("1")
time.sleep(300)
"""

LONG_DRIVER = r"""
import asyncio, os, sys
from pathlib import Path
from orchestrator.worker.executors.base import ExecSpec, job_env
from orchestrator.worker.executors.local import LocalExecutor
from gateway.client.jobs.pools import JobLimits

base, token, code = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
src, out = base / "workers" / "jK-1" / "src", base / "workers" / "jK-1" / "out"
src.mkdir(parents=True)
out.mkdir()
(src / "kernel.py").write_text(code)
env = job_env(out, {"PYTHONPATH": os.environ["PYTHONPATH"]})
argv = [sys.executable, "-P", "-s", str(src / "kernel.py"), str(out), token]
spec = ExecSpec(job_id="jK", attempt=1, argv=argv, checkout=src, outdir=out, env=env, timeout_s=600,
                limits=JobLimits())
outcome = asyncio.run(LocalExecutor().run(spec, asyncio.Event()))
print(outcome.returncode, outcome.error, outcome.output[-2000:])
"""


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("who", ["root", "unprivileged"])
def test_kill_9_of_the_worker_takes_every_process_of_the_job_down(who: str) -> None:
    base = Path(tempfile.mkdtemp(prefix="ksjk-"))
    base.chmod(0o755)
    token = os.urandom(6).hex()
    if who == "root":
        python, path, prefix = sys.executable, str(project_root()), []
    else:
        os.chown(base, NOBODY, NOBODY)
        python, site_packages = interpreter_for_nobody()
        path = f"{project_root()}{os.pathsep}{site_packages}"
        prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    worker = subprocess.Popen(
        [*prefix, python, "-c", LONG_DRIVER, str(base), token, SLEEPER],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": path},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd="/",
    )
    started = base / "workers" / "jK-1" / "out" / "started"
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started.exists(), worker.communicate(timeout=10)[0]
        assert len(processes_with(f"ks-orphan-{token}")) == 2
        worker.kill()  # SIGKILL: no clean-up of any kind by the worker
        worker.wait(10)
        deadline = time.monotonic() + 15
        while processes_with(f"ks-orphan-{token}") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_with(f"ks-orphan-{token}") == []
    finally:
        for pid in processes_with(f"ks-orphan-{token}"):
            os.kill(pid, signal.SIGKILL)
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
        make_writable(base)
        shutil.rmtree(base, ignore_errors=True)


REFUSED_DRIVER = r"""
import asyncio, json, os, sys
from pathlib import Path
from orchestrator.worker.executors.base import ExecSpec, job_env
from orchestrator.worker.executors.local import LocalExecutor
from gateway.client.jobs.pools import JobLimits

base = Path(sys.argv[1])
src, out = base / "workers" / "jR-1" / "src", base / "workers" / "jR-1" / "out"
src.mkdir(parents=True)
out.mkdir()
ran = base / "ran-unconfined"
argv = [sys.executable, "-c", f"open({str(ran)!r}, 'w').write('ran')"]
env = job_env(out, {"PYTHONPATH": os.environ["PYTHONPATH"]})
spec = ExecSpec(job_id="jR", attempt=1, argv=argv, checkout=src, outdir=out, env=env, timeout_s=60,
                limits=JobLimits())
outcome = asyncio.run(LocalExecutor().run(spec, asyncio.Event()))
print(json.dumps({"rc": outcome.returncode, "error": outcome.error, "isolation": outcome.isolation,
                  "ran": ran.exists()}))
"""

# Runs its argv in a new user namespace (ids mapped 1:1 by us, root outside) where no further user
# namespace may be made: what an unprivileged worker meets on a host that forbids them.
WITHOUT_USERNS = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
ready, go = os.pipe(), os.pipe()
pid = os.fork()
if pid == 0:
    if libc.unshare(0x10000000) != 0:
        os._exit(99)
    os.write(ready[1], b"x")
    os.read(go[0], 1)
    open("/proc/sys/user/max_user_namespaces", "w").write("0")
    os.execvp(sys.argv[1], sys.argv[1:])
os.read(ready[0], 1)
for name in ("uid_map", "gid_map"):
    open(f"/proc/{pid}/{name}", "w").write("0 0 4294967295")
os.write(go[1], b"x")
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_without_user_namespaces_an_unprivileged_worker_refuses_jobs_saying_why(short_tmp: Path) -> None:
    short_tmp.chmod(0o755)
    os.chown(short_tmp, NOBODY, NOBODY)
    python, site_packages = interpreter_for_nobody()
    nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_USERNS, *nobody, python, "-c", REFUSED_DRIVER, str(short_tmp)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{project_root()}{os.pathsep}{site_packages}"},
        cwd="/",
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["ran"] is False and outcome["rc"] is None
    assert outcome["error"].startswith("job refused: no sandbox can be built here: ")
    assert "user namespaces are not available to uid 65534" in outcome["error"], outcome["error"]
    assert outcome["isolation"][0].startswith("sandbox: UNAVAILABLE, jobs refused")
