"""Issue 15 through the real CLI: `kswarm up -f` runs the pools' job workers with the agents, heals a
killed worker, serves a job end to end, prints a worker token for a machine elsewhere, and Ctrl-C stops
agents, workers, gateway and Redis in that order, saying so, leaving no process (checked by pid)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx
import pytest

from gateway.client.target import auth_headers
from kstest.gateway import free_port
from kstest.up import (
    Up,
    alive,
    interrupt,
    kswarm,
    pids_of_swarm,
    processes_with,
    push_kernel,
    spec_text,
    wait_workers_running,
    workers_json,
)
from kstest.waiting import wait_for

pytestmark = pytest.mark.slow
KERNEL, PASSING = "kernels/add/k.py", "# standin: verdict pass\n"
SIXTEEN = 16  # the "16+ agents" for the stop paths


def test_ctrl_c_with_sixteen_agents_leaves_no_process(short_tmp: Path) -> None:
    home = short_tmp / "h"
    spec = short_tmp / "swarm.yaml"
    spec.write_text(spec_text("sx", agents=SIXTEEN, workers=1))
    up = Up(home, free_port(), "-f", str(spec))
    try:
        up.wait_ready()
        wait_for(
            lambda: len(pids_of_swarm(home)) >= SIXTEEN + 3, 120, "agents, worker, orchestrator and Redis"
        )
        pids = pids_of_swarm(home)
        code, _ = interrupt(up)
    finally:
        if up.proc.poll() is None:
            up.stop()
    out = up.output()
    assert code == 0, out[-3000:]
    assert f"stopped {SIXTEEN} agent(s)" in out and "everything stopped in" in out, out[-3000:]
    assert [role for role, pid in pids.items() if alive(pid)] == []
    assert processes_with(str(home)) == []


def test_up_runs_heals_and_stops_the_pools_workers(short_tmp: Path) -> None:
    home = short_tmp / "h"
    spec = short_tmp / "swarm.yaml"
    spec.write_text(spec_text("wk", agents=2, workers=2))
    up = Up(home, free_port(), "-f", str(spec))
    try:
        up.wait_ready()
        rows = wait_workers_running(home, 2)
        assert sorted((r["worker"], r["pool"], r["node"]) for r in rows) == [
            ("cpu-1", "cpu", "local"),
            ("cpu-2", "cpu", "local-2"),
        ]
        # `kswarm workers` and `kswarm workers --json` show the same state per worker (one rule).
        table = {line.split()[0]: line.split()[3] for line in kswarm(home, "workers").stdout.splitlines()[1:]}
        again = {r["worker"]: r["state"] for r in workers_json(home)["workers"]}
        assert table == again and set(again.values()) <= {"running", "idle"}, (table, again)
        # They run as the pool's worker principal, with the token in a file, never in argv or env.
        token_file = home / "swarm" / "workers" / "cpu.token"
        token = token_file.read_text().strip()
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        for r in rows:
            proc = Path(f"/proc/{r['pid']}")
            assert token not in (proc / "cmdline").read_text() + (proc / "environ").read_text()
        with httpx.Client(base_url=up.url, headers=auth_headers(token)) as c:
            me = c.get("/api/me").json()
        assert me["name"] == "worker-cpu" and me["kind"] == "worker"

        # kill -9 of a worker started by up -f is healed, and its successor serves the node at once.
        victim = next(r for r in rows if r["worker"] == "cpu-1")
        os.kill(victim["pid"], signal.SIGKILL)
        wait_for(
            lambda: any(r["worker"] == "cpu-1" and r["restarts"] == 1 for r in workers_json(home)["workers"]),
            30,
            "cpu-1 restarted",
        )
        rows = wait_workers_running(home, 2)
        assert next(r for r in rows if r["worker"] == "cpu-1")["pid"] != victim["pid"]

        # A job an agent submits runs on one of them.
        agent_token, branch = push_kernel(
            up, home, "wk", short_tmp, {"kernels/add/k.py": "# standin: verdict pass\n"}
        )
        with httpx.Client(base_url=up.url, headers=auth_headers(agent_token)) as c:
            job = c.post(
                "/api/jobs", json={"kernel": "kernels/add/k.py", "ref": branch, "repo": "wk/kernels"}
            )
            assert job.status_code == 201, job.text
            done = wait_for(
                lambda: (j := c.get(f"/api/jobs/{job.json()['id']}").json())["state"] == "succeeded" and j,
                60,
                "the job to succeed",
            )
        assert done["worker"].startswith("worker-cpu/")

        # A token for a worker started elsewhere, and the command line that uses it.
        granted = kswarm(home, "worker", "token", "cpu")
        assert granted.returncode == 0, granted.stderr
        assert granted.stdout.strip().startswith("ksw_") and len(granted.stdout.strip().splitlines()) == 1
        assert (
            f"python -m orchestrator.worker --pool cpu --gateway {up.url} --token-file cpu.token"
            in granted.stderr
        )
        assert kswarm(home, "worker", "token", "nosuch").returncode == 4

        pids = pids_of_swarm(home)
        assert {"orchestrator", "redis", "worker cpu-1", "worker cpu-2", "agent a-1", "agent a-2"} <= set(
            pids
        )
        code, _ = interrupt(up)
    finally:
        if up.proc.poll() is None:
            up.stop()
    out = up.output()
    assert code == 0, out[-3000:]
    steps = [
        "stopping (Ctrl-C again to force)",
        "stopped 2 agent(s)",
        "stopped 2 job worker(s)",
        "gateway stopped",
        "redis stopped",
        "everything stopped in",
    ]
    positions = [out.find(step) for step in steps]
    assert -1 not in positions and positions == sorted(positions), out[-3000:]
    assert "Traceback" not in out[out.find(steps[0]) :], out[-3000:]
    assert [role for role, pid in pids.items() if alive(pid)] == []
    assert processes_with(str(home)) == []


def test_a_job_in_a_pool_without_workers_is_told_it_waits(short_tmp: Path) -> None:
    """workers: 0 (they run elsewhere): the pools listing says no worker, `kswarm workers` says so,
    and the submitter gets a DM that its job waits."""
    home = short_tmp / "h"
    spec = short_tmp / "swarm.yaml"
    spec.write_text(spec_text("nw", agents=1, workers=0))
    up = Up(home, free_port(), "-f", str(spec))
    try:
        up.wait_ready()
        view = workers_json(home)
        assert view["workers"] == [] and view["pools"][0]["no_worker"] is True
        listing = kswarm(home, "workers")
        assert "pool cpu: no worker" in listing.stderr and listing.returncode == 0
        token, branch = push_kernel(
            up, home, "nw", short_tmp, {"kernels/add/k.py": "# standin: verdict pass\n"}
        )
        with httpx.Client(base_url=up.url, headers=auth_headers(token)) as c:
            job = c.post(
                "/api/jobs", json={"kernel": "kernels/add/k.py", "ref": branch, "repo": "nw/kernels"}
            )
            assert job.status_code == 201, job.text
            items = c.get("/api/inbox", params={"peek": "true"}).json()["items"]
        waits = [i for i in items if job.json()["id"] in i["text"]]
        assert waits and "waits for a worker" in waits[0]["text"] and waits[0]["sender"] == "jobs"
    finally:
        up.stop()


def test_detach_leaves_it_running_and_down_stops_every_process(short_tmp: Path) -> None:
    """With 16 agents: `kswarm down --purge` leaves no process of the swarm (by the records' pids and
    by a scan of every process for the home)."""
    home = short_tmp / "h"
    spec = short_tmp / "swarm.yaml"
    spec.write_text(spec_text("dt", agents=SIXTEEN, workers=1))
    port = free_port()
    started = kswarm(home, "up", "--home", str(home), "--port", str(port), "-f", str(spec), "-d", timeout=180)
    assert started.returncode == 0, started.stdout + started.stderr
    assert "kswarm is up" in started.stdout and "running in the background (pid" in started.stdout
    info = json.loads((home / "gateway.json").read_text())
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        wait_workers_running(home, 1)
        wait_for(
            lambda: len(pids_of_swarm(home)) >= SIXTEEN + 3, 120, "agents, worker, orchestrator and Redis"
        )
        pids = pids_of_swarm(home)
    finally:
        down = kswarm(home, "down", "--purge", timeout=180)
    assert down.returncode == 0, down.stderr
    assert f"stopped kswarm up (pid {info['pid']})" in down.stdout
    assert not alive(info["pid"])
    assert [role for role, pid in pids.items() if alive(pid)] == []
    assert processes_with(str(home)) == []


@pytest.mark.docker
def test_down_purge_with_sixteen_docker_agents_leaves_no_container_volume_or_process(short_tmp: Path) -> None:
    """The docker backend's stop path (it once hung with 18 agents and left 16 volumes): `up -d`, then
    `kswarm down --purge` leaves no container or volume of the swarm (by label) and no process."""
    import docker

    from kstest.orchestrator import docker_available

    ok, why = docker_available()
    if not ok:
        pytest.skip(why)
    client = docker.from_env()
    home, spec = short_tmp / "h", short_tmp / "swarm.yaml"
    spec.write_text(spec_text("dk", agents=SIXTEEN, workers=1, extra="backend: docker\n"))
    label = {"label": "kswarm.swarm=dk"}
    started = kswarm(
        home, "up", "--home", str(home), "--port", str(free_port()), "-f", str(spec), "-d", timeout=300
    )
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        wait_for(lambda: len(client.containers.list(filters=label)) >= SIXTEEN, 240, "16 agent containers")
    finally:
        down = kswarm(home, "down", "--purge", timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    assert client.containers.list(all=True, filters=label) == []
    assert client.volumes.list(filters=label) == []
    assert processes_with(str(home)) == []


@pytest.mark.docker
def test_ctrl_c_with_sixteen_docker_agents_leaves_no_container_volume_or_process(short_tmp: Path) -> None:
    import docker

    from kstest.orchestrator import docker_available

    ok, why = docker_available()
    if not ok:
        pytest.skip(why)
    client = docker.from_env()
    home, spec = short_tmp / "h", short_tmp / "swarm.yaml"
    spec.write_text(spec_text("dc", agents=SIXTEEN, workers=1, extra="backend: docker\n"))
    label = {"label": "kswarm.swarm=dc"}
    up = Up(home, free_port(), "-f", str(spec))
    try:
        up.wait_ready()
        wait_for(lambda: len(client.containers.list(filters=label)) >= SIXTEEN, 240, "16 agent containers")
        code, _ = interrupt(up)
    finally:
        if up.proc.poll() is None:
            up.stop()
    out = up.output()
    assert code == 0, out[-3000:]
    assert f"stopped {SIXTEEN} agent(s)" in out, out[-3000:]
    assert client.containers.list(all=True, filters=label) == []
    assert client.volumes.list(filters=label) == []
    assert processes_with(str(home)) == []
