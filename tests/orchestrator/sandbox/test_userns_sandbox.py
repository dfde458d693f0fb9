"""The process backend without root: agents in user/mount/pid/network namespaces, attacked from inside.

The orchestrator side runs as ``nobody`` (a driver script under ``setpriv``), exactly as an operator
without root would: ``isolation: auto`` must pick ``userns``, and both agents then run as that same uid,
so nothing but the sandbox keeps them apart. The driver starts two agents, runs each attack through
``ProcessRuntime.exec`` (which joins the agent's namespaces) and reports; this test judges.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.runtime.base import project_root
from orchestrator.sandbox.bubblewrap import BubblewrapSandbox

NOBODY = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become an unprivileged user")

AGENT = """
import os, signal, subprocess, time
from pathlib import Path
mem, work = Path(os.environ["KSWARM_MEMORY"]), Path(os.environ["KSWARM_WORK"])
(mem / "secret.md").write_text("secret of " + os.environ["KSWARM_AGENT"])
signal.signal(signal.SIGTERM, lambda *_: ((work / "term").write_text("bye"), os._exit(0)))
subprocess.Popen(["setsid", "sleep", "300"])  # tries to outlive the agent
(work / "ready").write_text("1")
time.sleep(600)
"""

DRIVER = r"""
import json, os, signal, socket, sys, threading, time
from pathlib import Path
from orchestrator.swarm_dir.provision import SwarmLayout, ensure_dirs
from orchestrator.runtime.base import LaunchSpec, project_root
from orchestrator.runtime.process import ProcessRuntime, children_of
from orchestrator.spec import parse_spec

home = Path(sys.argv[1])
agent_code = sys.argv[2]
run = home / "run"
run.mkdir()
(home / "operator.token").write_text("ksw_operator_secret")
received = []
door = socket.socket(socket.AF_UNIX)
door.bind(str(run / "gateway.sock"))
door.listen()
threading.Thread(target=lambda: received.append(door.accept()[0].recv(100).decode()), daemon=True).start()
tcp = socket.socket()
tcp.bind(("127.0.0.1", 0))
tcp.listen()

spec = parse_spec(
    "swarm: s\nagents:\n  - pattern: a-{i}\n    count: 2\n    resources: {pids: 48}\n"
    f"    runtime: {{command: {json.dumps(['python', '-c', agent_code])}}}\n"
)
layout = SwarmLayout(home)
runtime = ProcessRuntime(layout, "s", "auto")
report = {"mode": runtime.mode, "warning": runtime.warning, "uid": os.getuid()}
for agent in spec.expand():
    ensure_dirs(layout, agent, "s", None)
    runtime.start(LaunchSpec(agent=agent, swarm="s", gateway_socket=run / "gateway.sock"))
deadline = time.monotonic() + 30
while not all((layout.agent_dir(n, "work") / "ready").exists() for n in ("a-1", "a-2")):
    assert time.monotonic() < deadline, [layout.log_file(n).read_text() for n in ("a-1", "a-2")]
    time.sleep(0.1)

def sh(name, command):
    done = runtime.exec(name, ["sh", "-c", command])
    return {"rc": done.returncode, "out": done.output}

py = sys.executable
port = tcp.getsockname()[1]
connect_tcp = f"import socket; socket.create_connection(('127.0.0.1', {port}), 2); print('CONNECTED')"
knock = "import socket; s = socket.socket(socket.AF_UNIX); "
knock += f"s.connect('{run}/gateway.sock'); s.sendall(b'hello from a-1')"
own_data, all_data = layout.agent_data("a-1"), layout.root / "data"
cgroup_kills = "$(find /sys/fs/cgroup -name cgroup.kill 2>/dev/null)"
b_mem = layout.agent_dir("a-2", "memory")
report["attacks"] = {
    "read_b_memory": sh("a-1", f"cat {b_mem}/secret.md"),
    "write_b_work": sh("a-1", f"touch {layout.agent_dir('a-2', 'work')}/pwned"),
    "list_agents": sh("a-1", f"ls {layout.root / 'data'}"),
    "list_home": sh("a-1", f"ls {home}"),
    "read_operator_token": sh("a-1", f"cat {home}/operator.token"),
    "write_project": sh("a-1", f"touch {project_root()}/pwned"),
    "list_project_parent": sh("a-1", f"ls {project_root().parent}"),
    "list_home_parent": sh("a-1", f"ls {home.parent}"),
    "read_sibling": sh("a-1", f"cat {home.parent}/sibling.secret"),
    "see_driver": sh("a-1", f"ls /proc/{os.getpid()}/root"),
    "count_pids": sh("a-1", "ls /proc | grep -c '^[0-9]'"),
    "tcp_to_host": sh("a-1", f'{py} -c "{connect_tcp}"'),
    "umount_bind": sh("a-1", f"umount {layout.agent_data('a-1')}"),
    "nested_userns_umount": sh("a-1", f"unshare -Urm sh -c 'umount -l {own_data}; ls {all_data}'"),
    "agent_environ": sh("a-1", "tr '\\0' '\\n' < /proc/2/environ"),
    "replace_gateway_socket": sh("a-1", f"mv {run}/gateway.sock {run}/real.sock || rm {run}/gateway.sock"),
    "sys_net": sh("a-1", "ls /sys/class/net"),
    "cgroup_write": sh("a-1", f"for f in {cgroup_kills}; do echo 1 > $f && echo WROTE; done; true"),
    "agent_limits": sh("a-1", "cat /proc/2/limits"),
    "no_new_privs": sh("a-1", "grep NoNewPrivs /proc/2/status"),
}
report["own"] = {
    "read_own_memory": sh("a-1", f"cat {layout.agent_dir('a-1', 'memory')}/secret.md"),
    "gateway_door": sh("a-1", f'{py} -c "{knock}"'),
}
time.sleep(0.5)
report["door_received"] = received

def tree(pid):
    out = [pid]
    for kid in children_of(pid):
        out += tree(kid)
    return out

launchers = {n: int(runtime.status(n).ref) for n in ("a-1", "a-2")}
report["trees"] = {n: tree(p) for n, p in launchers.items()}
report["programs"] = sorted({Path(f"/proc/{p}/exe").resolve().name for p in report["trees"]["a-1"]})
runtime.stop("a-2")
report["a2_term"] = (layout.agent_dir("a-2", "work") / "term").read_text()
os.kill(launchers["a-1"], signal.SIGKILL)
time.sleep(2)
report["b_secret_intact"] = (b_mem / "secret.md").read_text()
print(json.dumps(report))
"""


def interpreter_for_nobody() -> tuple[str, str]:
    """A Python ``nobody`` can run with this environment's packages: ours, or the system's of the same
    version with our site-packages on the path (a pyenv Python under /root is out of its reach)."""
    import site

    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        probe = subprocess.run(
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


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


@pytest.fixture(params=["bubblewrap", "namespaces"])
def sandbox(request: pytest.FixtureRequest) -> str:
    """Each implementation of the one sandbox, chosen through the variable every launcher gets."""
    if request.param == "bubblewrap" and BubblewrapSandbox().unavailable():
        pytest.skip(f"not tested with bubblewrap: {BubblewrapSandbox().unavailable()}")
    return request.param


def test_without_root_agents_are_sandboxed_from_each_other(short_tmp: Path, sandbox: str) -> None:
    short_tmp.chmod(0o755)
    (short_tmp / "sibling.secret").write_text("ksw_sibling_secret")  # readable by anyone, outside
    (short_tmp / "sibling.secret").chmod(0o644)
    home = short_tmp / "nobody-home"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    python, site_packages = interpreter_for_nobody()
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": f"{project_root()}{os.pathsep}{site_packages}",
        "HOME": str(home),
        "ANTHROPIC_API_KEY": "sk-ant-operator-secret",
        "KSWARM_SANDBOX": sandbox,
    }
    done = subprocess.run(
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            python,
            "-c",
            DRIVER,
            str(home),
            AGENT,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["mode"] == "userns" and report["warning"] is None and report["uid"] == NOBODY
    assert ("bwrap" in report["programs"]) == (sandbox == "bubblewrap"), report["programs"]

    attacks = report["attacks"]
    for name in ("read_b_memory", "write_b_work", "read_operator_token", "write_project", "see_driver"):
        assert attacks[name]["rc"] != 0, (name, attacks[name])
    assert "secret of a-2" not in attacks["read_b_memory"]["out"]
    assert attacks["list_agents"]["out"].split() == ["a-1"]
    assert "operator.token" not in attacks["list_home"]["out"]
    # Beside the project and the home, only what leads to paths the agent needs is there at all.
    on_the_way = {project_root().name}
    if home.is_relative_to(project_root().parent):  # CI clones under /tmp, where short_tmp lives too
        on_the_way.add(home.relative_to(project_root().parent).parts[0])
    assert set(attacks["list_project_parent"]["out"].split()) <= on_the_way
    assert attacks["list_home_parent"]["out"].split() == ["nobody-home"]
    assert attacks["read_sibling"]["rc"] != 0 and "ksw_" not in attacks["read_sibling"]["out"]
    assert int(attacks["count_pids"]["out"].strip()) < 10  # its own namespace: init, agent, sleep, sh...
    assert "CONNECTED" not in attacks["tcp_to_host"]["out"]
    assert attacks["umount_bind"]["rc"] != 0
    assert "a-2" not in attacks["nested_userns_umount"]["out"]
    assert attacks["replace_gateway_socket"]["rc"] != 0
    sys_net = attacks["sys_net"]["out"]  # its own network namespace's sysfs (only lo), or none (bubblewrap)
    assert sys_net.split() == ["lo"] or "No such file or directory" in sys_net, sys_net
    assert "WROTE" not in attacks["cgroup_write"]["out"]
    assert any(
        line.startswith("Max processes") and " 48 " in line
        for line in attacks["agent_limits"]["out"].splitlines()
    )
    assert attacks["no_new_privs"]["out"].split() == ["NoNewPrivs:", "1"]
    environ = attacks["agent_environ"]["out"]
    assert "KSWARM_AGENT=a-1" in environ and "operator-secret" not in environ

    own = report["own"]
    assert own["read_own_memory"]["out"].strip() == "secret of a-1"
    assert own["gateway_door"]["rc"] == 0 and report["door_received"] == ["hello from a-1"]

    assert report["a2_term"] == "bye"  # SIGTERM reached the agent through launcher and init
    assert report["b_secret_intact"] == "secret of a-2"
    # kill -9 of the recorded pid takes the whole agent down, the setsid'd sleep included.
    everything = [pid for pids in report["trees"].values() for pid in pids]
    assert len(report["trees"]["a-1"]) >= 4  # launcher, init, agent, sleep
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in everything) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in everything if alive(pid)] == []


def test_a_home_inside_a_read_only_path_is_hidden_and_nested_mounts_stay_read_only(
    short_tmp: Path, sandbox: str
) -> None:
    """``$KSWARM_HOME`` inside the project (a checkout's ``.kswarm/``) must not be readable through the
    project's read-only bind; a mount inside a read-only path (Docker's /etc/hosts) must not break the
    sandbox, and stays read-only."""
    short_tmp.chmod(0o755)
    project = short_tmp / "project"
    home = project / ".kswarm"
    own, other = home / "swarm" / "data" / "a-1", home / "swarm" / "data" / "a-2"
    for d in (own, other, project / "nested"):
        d.mkdir(parents=True)
    (home / "operator.token").write_text("ksw_operator_secret")
    (other / "secret").write_text("ksw_other_agent")
    (project / "code.py").write_text("print('shared code')")
    for path in [project, *project.rglob("*")]:
        os.chown(path, NOBODY, NOBODY)
    script = (
        f"cat {project}/code.py; cat {project}/nested/mounted; "
        f"cat {home}/operator.token {other}/secret; ls {home}/swarm/data; "
        f"touch {own}/mine && echo OWN-WRITE; touch {project}/nested/x || echo NESTED-READ-ONLY"
    )
    config = {
        "mode": "userns",
        "argv": ["/bin/sh", "-c", script],
        "env": {"PATH": "/usr/bin:/bin"},
        "cwd": str(own),
        "limits": {},
        "ro": [str(project)],
        "rw": [str(own)],
        "hide": [str(home)],
    }
    python, site_packages = interpreter_for_nobody()
    launch = (
        f"mount -t tmpfs nested {project}/nested && echo mounted-data > {project}/nested/mounted && "
        f"setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups "
        f"{python} -m orchestrator.runtime.launch '{json.dumps(config)}'"
    )
    done = subprocess.run(  # a private mount namespace: the nested mount exists only for this run
        ["unshare", "-m", "--propagation", "private", "sh", "-c", launch],
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": f"{project_root()}{os.pathsep}{site_packages}",
            "KSWARM_SANDBOX": sandbox,
        },
        cwd="/",
        timeout=60,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "shared code" in out and "mounted-data" in out
    assert "ksw_" not in out
    assert "a-2" not in out.split() and "OWN-WRITE" in out and "NESTED-READ-ONLY" in out
