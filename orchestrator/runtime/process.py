"""The ``process`` backend: one OS process per agent, isolated by its own uid or by namespaces.

Isolation modes (``process.isolation`` in the spec):

- ``uid`` (root): each agent runs as a uid of its own, in a private mount namespace (private ``/tmp``,
  untraversable dirs covered) and a network namespace with only ``lo``; permissions keep agents out of
  each other's dirs, and the gateway is reached by its unix socket only.
- ``userns``: the one sandbox (``orchestrator.sandbox``): user, mount, pid, network and IPC namespaces
  around a minimal root that holds only the agent's own dirs, the gateway socket and read-only
  system/project/Python dirs, and a seccomp filter; without root the agent runs as the operator's uid in
  there, as root as a uid of its own as well.
- ``none`` (only without root): agents run as the operator, on the host's network; ``kswarm up``
  warns. As root it is refused: agents would run as root.

``auto`` picks ``uid`` as root, else ``userns`` where the kernel allows it, else ``none``.

Each agent is started through ``orchestrator.runtime.launch`` (rlimits, namespaces, uid drop, exec) in
a new session. Its pid and kernel start time go to ``swarm/agents/<name>.proc.json`` so
that a restarted orchestrator adopts it: a pid counts as the agent only while ``/proc/<pid>`` has the
same start time in the same boot (``boot_id``: pids get recycled, and a reboot starts the clock again);
a record without a boot id (written before they were) needs the agent's ``KSWARM_AGENT`` in the
process's environment too. The environment is no witness for the rest: it reads empty for a moment
while the launcher execs the agent, and an agent seen dead then was restarted beside itself. The
orchestrator's own child is judged by ``wait()`` instead: while it exits, ``/proc`` already reads an
empty environment but its exit status cannot be collected yet.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from orchestrator.runtime.base import (
    SAFE_PATH,
    ExecResult,
    LaunchSpec,
    RuntimeStatus,
    agent_command,
    agent_environment,
    host_paths,
    project_root,
    python_paths,
)
from orchestrator.sandbox.probe import launcher_env
from orchestrator.swarm_dir.provision import SwarmLayout, purge_agent, release_disk
from orchestrator.swarm_dir.uid_ranges import process_owners

CLK_TCK = os.sysconf("SC_CLK_TCK")
# How long an exec waits for an agent whose launcher is still setting up its isolation (its start is
# a Python start-up, imports and a few mounts: well under a second on an idle machine).
STARTING_S = 30.0
NOBODY = 65534


def proc_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); None if gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # the comm field may contain spaces and parentheses
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


@functools.cache  # read once: a process lives within one boot
def boot_id() -> str:
    """This boot's id: a pid and a start time name one process only within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def proc_env(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def children_of(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def agent_process(launcher: int) -> int:
    """The agent's own process: the launcher itself (it execs the agent), or, in the namespace sandbox,
    the first descendant whose environment is the agent's (launcher -> init -> agent)."""
    pid = launcher
    for _ in range(3):
        if "KSWARM_WORK" in proc_env(pid):
            return pid
        kids = children_of(pid)
        if not kids:
            break
        pid = kids[0]
    return launcher


def pids_of_uid(uid: int) -> list[int]:
    """The live processes of ``uid``. Zombies are not among them (``process_owners``): an exited process
    awaiting its reaper (bubblewrap's init, orphaned when its monitor exits first, waits for the host's
    pid 1) runs nothing, cannot be signalled, and must not make the uid look taken."""
    return [pid for pid, owner in process_owners() if owner == uid]


def can_isolate_by_uid() -> bool:
    return os.geteuid() == 0


def namespaces_unavailable() -> str | None:
    """Why the ``userns`` mode cannot work here (None: it can): a whole sandbox is built, around a
    Python that exits at once (nested mounts or a refused /proc show up here, not in every agent).
    As root it is built as an agent's would be: by an unprivileged uid (``nobody``)."""
    needed = [str(project_root()), *map(str, python_paths())]
    config = {
        "mode": "userns",
        "uid": NOBODY if can_isolate_by_uid() else None,
        "argv": [sys.executable, "-c", ""],
        "env": {"PATH": SAFE_PATH},
        "cwd": "/",
        "limits": {},
        "needed": needed,
        "ro": needed,
        "rw": [],
    }
    try:
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator.runtime.launch", json.dumps(config)],
            capture_output=True,
            text=True,
            env=launcher_env(),
            cwd="/",
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        return "building a namespace sandbox did not finish within 60 s"
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["unknown"])[-1]


def choose_isolation(requested: str) -> str:
    """The isolation mode to use for ``requested`` (auto, uid, userns, none); raises if it cannot work."""
    if requested == "uid" and not can_isolate_by_uid():
        raise RuntimeError("process isolation 'uid' needs root; use 'userns' (or 'auto')")
    if requested == "none" and can_isolate_by_uid():
        raise RuntimeError(
            "process isolation 'none' as root would run agents as root, on the host's network; "
            "use 'uid' or 'userns' (or 'auto')"
        )
    if requested == "userns":
        why = namespaces_unavailable()
        if why:
            raise RuntimeError(f"process isolation 'userns' is not available here: {why}")
    if requested != "auto":
        return requested
    if can_isolate_by_uid():
        return "uid"
    return "userns" if namespaces_unavailable() is None else "none"


def isolation_warning(mode: str) -> str | None:
    """What ``kswarm up`` must say about ``mode`` (None: nothing to warn about)."""
    if mode != "none":
        return None
    return (
        "the process backend does not isolate agents here (not root, and no user namespaces): agents run "
        "as your user, can read each other's dirs and reach every loopback port (the gateway's TCP port, "
        "a local model server); use --backend docker for isolation"
    )


class ProcessRuntime:
    """``AgentRuntime`` for local processes."""

    backend = "process"

    def __init__(self, layout: SwarmLayout, swarm: str, isolation: str = "auto") -> None:
        self.layout = layout
        self.swarm = swarm
        self.isolation = isolation
        self.children: dict[str, subprocess.Popen[bytes]] = {}  # only ours: we reap them

    @functools.cached_property
    def mode(self) -> str:
        """The isolation in effect; decided on first use (``auto`` may build a probe sandbox), so that
        commands that only look at agents (``kswarm ps``, ``logs``, ``down``) never pay for it."""
        return choose_isolation(self.isolation)

    @property
    def own_uids(self) -> bool:
        """Does every agent run as a uid of its own (and so need one allocated)?"""
        return self.mode == "uid" or (self.mode == "userns" and can_isolate_by_uid())

    @property
    def warning(self) -> str | None:
        return isolation_warning(self.mode)

    # -- records ----------------------------------------------------------------------------
    def _record_path(self, name: str) -> Path:
        return self.layout.root / "agents" / f"{name}.proc.json"

    def _record(self, name: str) -> dict | None:
        try:
            return json.loads(self._record_path(name).read_text())
        except (OSError, ValueError):
            return None

    def _alive_pid(self, name: str) -> int | None:
        """The agent's pid if the recorded process is still that agent."""
        rec = self._record(name)
        if not rec:
            return None
        pid = rec["pid"]
        child = self.children.get(name)
        if child is not None and child.pid == pid:
            # Our own child: its pid cannot be reused before we reap it, and /proc is no witness while
            # it exits (its environ reads empty before wait() can collect the exit status).
            return pid if child.poll() is None else None
        if proc_start_ticks(pid) != rec["start_ticks"]:
            return None
        if rec.get("boot_id"):
            return pid if rec["boot_id"] == boot_id() else None
        if proc_env(pid).get("KSWARM_AGENT") != name:  # a record from before boot ids
            return None
        return pid

    # -- protocol ---------------------------------------------------------------------------
    def _launch_config(self, launch: LaunchSpec, argv: list[str]) -> dict:
        name = launch.agent.name
        assert launch.gateway_socket is not None, "the process backend reaches the gateway by its socket"
        paths = host_paths(self.layout, name, launch.gateway_socket)
        env = agent_environment(launch, paths)
        exe = argv[0]
        if exe in ("python", "python3"):
            exe = sys.executable
        elif "/" not in exe:
            exe = shutil.which(exe, path=SAFE_PATH) or exe
        res = launch.agent.resources
        uid = launch.uid if self.own_uids else None
        return {
            "mode": self.mode,
            "uid": uid,
            "argv": [exe, *argv[1:]],
            "env": env,
            "cwd": str(paths.work),
            "limits": {
                "memory": res.memory_bytes(),
                "cpu_time_s": res.cpu_time_s,
                "files": res.disk_files,
                "file_size": res.disk_bytes(),
                "pids": res.pids,
            },
            "needed": [
                str(self.layout.agent_data(name)),
                str(launch.gateway_socket.parent),
                str(project_root()),
                *map(str, python_paths()),
            ],
            # userns mode: what the sandbox's root holds besides the system dirs. The socket dir is
            # read-only: an agent could otherwise put its own listener in the gateway's place.
            "ro": [str(project_root()), *map(str, python_paths()), str(launch.gateway_socket.parent)],
            "rw": [str(self.layout.agent_data(name))],
            # $KSWARM_HOME (every agent's files, the operator token, Redis), should the project hold it.
            "hide": [str(self.layout.root.parent)],
        }

    def start(self, launch: LaunchSpec) -> RuntimeStatus:
        name = launch.agent.name
        if self._alive_pid(name) is not None:
            return self.status(name)
        self._kill_leftovers(name)
        config = self._launch_config(launch, agent_command(launch))
        if config["uid"] is not None:
            self._check_uid_free(name, config["uid"])
        log_path = self.layout.log_file(name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # The agent's output is bounded by RLIMIT_FSIZE too (resources.disk): a log halfway there is
        # kept as <name>.log.1 and a new one begun, so that a long-lived agent never reaches it.
        with contextlib.suppress(FileNotFoundError):
            if log_path.stat().st_size > config["limits"]["file_size"] // 2:
                log_path.replace(log_path.with_name(log_path.name + ".1"))
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "orchestrator.runtime.launch", json.dumps(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # survives us; a terminal's Ctrl-C does not reach it
                cwd="/",
                # KSWARM_AGENT from the first instant: adoption checks it in /proc/<pid>/environ.
                env={**launcher_env(), "KSWARM_AGENT": name},
            )
        self.children[name] = proc
        ticks = proc_start_ticks(proc.pid)
        record = {
            "pid": proc.pid,
            "start_ticks": ticks,
            "boot_id": boot_id(),
            "started_at": time.time(),
            "uid": config["uid"],
            "mode": self.mode,
        }
        tmp = self._record_path(name).with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(self._record_path(name))
        return RuntimeStatus(name, True, str(proc.pid), record["started_at"])

    def _kill_leftovers(self, name: str) -> None:
        """Kill what is left of the agent's last instance before it starts again: a ``kill -9`` of the
        launcher leaves its descendants to die of their parent-death signal a moment later, and one
        that does not (a tool's child that set its own) would otherwise run beside the new instance.
        Ours are told by their environment: this agent's name and a work dir under this home."""
        ours = str(self.layout.root.resolve()) + "/"
        for pid, _owner in process_owners():
            env = proc_env(pid)
            if env.get("KSWARM_AGENT") == name and env.get("KSWARM_WORK", "").startswith(ours):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def _check_uid_free(self, name: str, uid: int) -> None:
        """Refuse a uid that anything but this swarm's own leftovers runs as: stopping the agent kills
        every process of its uid. Ours say so in their environment (our agents' ``KSWARM_WORK``); a
        process that does not (another swarm's agent, or one with a cleared environment) is not
        killed but refused, by name, in the agent's ``last_error``."""
        ours = str(self.layout.root.resolve())
        for pid in pids_of_uid(uid):
            work = proc_env(pid).get("KSWARM_WORK", "")
            if not work.startswith(ours + "/"):
                where = f"of another swarm ({work})" if work else "(not one of this swarm's agents)"
                raise RuntimeError(
                    f"uid {uid} for agent {name} is in use by pid {pid} {where}; "
                    "leave process.uid_base unset so that each home gets its own uid block"
                )

    def status(self, name: str) -> RuntimeStatus:
        rec = self._record(name)
        pid = self._alive_pid(name)
        if pid is not None and rec is not None:
            return RuntimeStatus(name, True, str(pid), rec["started_at"])
        child = self.children.get(name)
        code = child.poll() if child is not None else None
        return RuntimeStatus(name, False, str(rec["pid"]) if rec else "", None, code)

    def list(self) -> dict[str, RuntimeStatus]:
        names = [p.name.removesuffix(".proc.json") for p in (self.layout.root / "agents").glob("*.proc.json")]
        return {n: self.status(n) for n in sorted(names)}

    def _signal(self, pid: int, sig: int) -> None:
        try:
            os.killpg(pid, sig)  # the whole session: start_new_session made the pid the group id
        except ProcessLookupError:
            pass
        except PermissionError:
            os.kill(pid, sig)

    def stop(self, name: str, timeout: float = 10.0) -> None:
        pid = self._alive_pid(name)
        rec = self._record(name)
        if pid is not None:
            self._signal(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self._alive_pid(name) is not None:
                self._reap(name)
                time.sleep(0.05)
            if self._alive_pid(name) is not None:
                self._signal(pid, signal.SIGKILL)
        # A uid of its own means every process of that uid is the agent's, whatever group it fled to.
        uid = rec.get("uid") if rec else None
        if uid is not None:
            for other in pids_of_uid(uid):
                try:
                    os.kill(other, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self._kill_leftovers(name)  # a tree whose launcher died before: its group is not ours to signal
        self._reap(name, wait=2.0)

    def _reap(self, name: str, wait: float = 0.0) -> None:
        child = self.children.get(name)
        if child is not None:
            try:
                child.wait(wait) if wait else child.poll()
            except subprocess.TimeoutExpired:
                pass

    def logs(self, name: str, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        path = self.layout.log_file(name)
        if not path.exists():
            return
        with open(path, errors="replace") as fh:
            lines = fh.readlines()
            yield from (lines[-tail:] if tail else lines)
            while follow:
                line = fh.readline()
                if line:
                    yield line
                    continue
                if self._alive_pid(name) is None:
                    return
                time.sleep(0.2)

    def exec(self, name: str, argv: builtins.list[str], timeout: float = 60.0) -> ExecResult:
        rec = self._record(name)
        if rec is None or self._alive_pid(name) is None:
            raise RuntimeError(f"agent {name} is not running")
        pid = rec["pid"]
        env = self._started_env(name, pid)
        launch_like = {
            "mode": rec.get("mode", "uid" if rec["uid"] is not None else "none"),
            "uid": rec["uid"],
            "join_pid": pid,
            "argv": [shutil.which(argv[0], path=SAFE_PATH) or argv[0], *argv[1:]],
            "env": env,
            "cwd": env.get("KSWARM_WORK", "/"),
            "limits": {},
            "needed": [str(self.layout.agent_data(name)), *map(str, python_paths()), str(project_root())],
        }
        if env.get("KSWARM_GATEWAY_SOCKET"):
            launch_like["needed"].append(str(Path(env["KSWARM_GATEWAY_SOCKET"]).parent))
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator.runtime.launch", json.dumps(launch_like)],
            capture_output=True,
            timeout=timeout,
            env=launcher_env(),
            cwd="/",
        )
        return ExecResult(done.returncode, (done.stdout + done.stderr).decode(errors="replace"))

    def _started_env(self, name: str, pid: int) -> dict[str, str]:
        """The agent's environment once the agent itself runs. Until then ``pid`` is its launcher, still
        in the host's namespaces or setting up its own: an exec that joined them would run as the
        agent's uid with the host's view (the swarm's 0700 home untraversable, the host's /tmp)."""
        deadline = time.monotonic() + STARTING_S
        while "KSWARM_WORK" not in (env := proc_env(agent_process(pid))):
            if self._alive_pid(name) != pid:
                raise RuntimeError(f"agent {name} is not running")
            if time.monotonic() > deadline:
                raise RuntimeError(f"agent {name} is still starting after {STARTING_S:.0f}s; try again")
            time.sleep(0.02)  # a launcher's set-up has no event to wait on: its exec shows in /proc
        return env

    def remove(self, name: str, purge: bool = False) -> None:
        self.stop(name)
        self._record_path(name).unlink(missing_ok=True)
        self.children.pop(name, None)
        release_disk(self.layout, name)
        if purge:
            purge_agent(self.layout, name)
