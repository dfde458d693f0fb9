"""compose's ``init`` and the services' start (infra/compose/kswarm_compose.py), against a real
redis-server, without Docker: tokens are generated on first start, of the principal they claim to be
(a worker's bound to its pool), kept while they still are, and a service without its token refuses
to start. The attacks: a secrets file swapped for another principal's token, a principal's name taken
by another kind, an empty token file."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from redis.asyncio import Redis
from test_compose_config import compose_command

from gateway.jobs.queue import JobQueue
from gateway.principals import Principal, PrincipalKind, PrincipalStore
from kstest.gateway import GatewayThread
from kstest.orchestrator import REPO

HELPER = REPO / "infra" / "compose" / "kswarm_compose.py"
SPEC = REPO / "infra" / "compose" / "swarm.yaml"
SWARM = "kswarm"


def secrets_dir(root: Path) -> Path:
    for name in ("model_key", "operator_token", "worker_token_cpu", "gitea_admin_token"):
        (root / name).mkdir(parents=True, exist_ok=True)
    return root


def worker_token_path(secrets: Path, pool: str) -> Path:
    """Where init writes a pool's worker token: its own secret dir (compose mounts it in that pool's
    worker service alone)."""
    return secrets / f"worker_token_{pool}" / "worker_token"


def helper(redis_url: str, secrets: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        **os.environ,
        "KSWARM_GATEWAY_REDIS_URL": redis_url,
        "KSWARM_SECRETS": str(secrets),
        "KSWARM_SPEC_FILE": str(SPEC),
        "KSWARM_GATEWAY_SWARM": SWARM,
        **env,
    }
    return subprocess.run(
        [sys.executable, str(HELPER), *args], capture_output=True, text=True, env=environ, timeout=60
    )


def with_store(redis_url: str, fn: object) -> object:
    async def main() -> object:
        redis = Redis.from_url(redis_url, decode_responses=True)
        try:
            return await fn(PrincipalStore(redis, SWARM), JobQueue(redis))  # type: ignore[operator]
        finally:
            await redis.aclose()

    return asyncio.run(main())


def verify(redis_url: str, token: str) -> Principal | None:
    async def check(store: PrincipalStore, queue: JobQueue) -> Principal | None:
        return await store.verify(token)

    return with_store(redis_url, check)  # type: ignore[return-value]


def bound_pool(redis_url: str, name: str) -> str | None:
    async def check(store: PrincipalStore, queue: JobQueue) -> str | None:
        return await queue.bound_pool(name)

    return with_store(redis_url, check)  # type: ignore[return-value]


def test_init_generates_tokens_of_the_right_principals_once(clean_redis: str, tmp_path: Path) -> None:
    secrets = secrets_dir(tmp_path / "secrets")
    first = helper(clean_redis, secrets, "init")
    assert first.returncode == 0, first.stderr
    operator_file = secrets / "operator_token" / "operator_token"
    worker_file = worker_token_path(secrets, "cpu")
    operator, worker = operator_file.read_text().strip(), worker_file.read_text().strip()
    for path in (operator_file, worker_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    op = verify(clean_redis, operator)
    wk = verify(clean_redis, worker)
    assert op is not None and (op.name, op.kind) == ("operator", PrincipalKind.operator)
    assert wk is not None and (wk.name, wk.kind) == ("worker-cpu", PrincipalKind.worker)
    assert bound_pool(clean_redis, "worker-cpu") == "cpu"  # it takes the cpu pool's jobs only
    assert "no model key" in first.stdout

    again = helper(clean_redis, secrets, "init")  # a restart, `docker compose up` again
    assert again.returncode == 0, again.stderr
    assert "generated" not in again.stdout
    assert operator_file.read_text().strip() == operator and worker_file.read_text().strip() == worker


def test_attack_a_worker_secret_holding_the_operators_token_is_replaced(
    clean_redis: str, tmp_path: Path
) -> None:
    """Whoever swaps the worker's secret file for the operator's token (a copy-paste, or on purpose)
    must not get a worker container that acts as the operator: init keeps a token only if it verifies
    as the very principal of that file."""
    secrets = secrets_dir(tmp_path / "secrets")
    assert helper(clean_redis, secrets, "init").returncode == 0
    operator = (secrets / "operator_token" / "operator_token").read_text()
    worker_file = worker_token_path(secrets, "cpu")
    worker_file.write_text(operator)
    done = helper(clean_redis, secrets, "init")
    assert done.returncode == 0, done.stderr
    now = verify(clean_redis, worker_file.read_text().strip())
    assert now is not None and (now.name, now.kind) == ("worker-cpu", PrincipalKind.worker)
    assert "generated the worker token of worker-cpu" in done.stdout


def test_attack_a_principal_name_taken_by_another_kind_is_refused(clean_redis: str, tmp_path: Path) -> None:
    """An agent registered as ``worker-cpu`` (or ``operator``) before the first start must not be
    handed the worker's (the operator's) secret: init stops with one line and writes no token."""

    async def squat(store: PrincipalStore, queue: JobQueue) -> None:
        await store.create("worker-cpu", PrincipalKind.agent)

    with_store(clean_redis, squat)
    secrets = secrets_dir(tmp_path / "secrets")
    done = helper(clean_redis, secrets, "init")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == (
        "kswarm: principal worker-cpu is of kind agent, not an enabled worker: no token written"
    )
    assert not worker_token_path(secrets, "cpu").exists()


@pytest.mark.parametrize(
    ("service", "secret"),
    [("worker", "worker_token"), ("orchestrator", "operator_token"), ("kickoff", "operator_token")],
)
def test_a_service_without_its_token_refuses_to_start(
    clean_redis: str, tmp_path: Path, service: str, secret: str
) -> None:
    """No empty default: a missing or empty token file ends the service before it reaches anything."""
    secrets = secrets_dir(tmp_path / "secrets")
    (secrets / "operator_token" / "operator_token").write_text("\n")  # empty, as an attacker might leave it
    done = helper(clean_redis, secrets, service, KSWARM_URL="http://127.0.0.1:9")
    assert done.returncode != 0
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"kswarm: no {secret} at ") and "init service writes it" in line


def test_healthchecks_say_what_is_missing_not_only_whether_the_gateway_answers(
    gateway: GatewayThread, tmp_path: Path
) -> None:
    """A gateway that answers is not a healthy orchestrator or worker: with no supervisor beating and
    no worker holding the pool's node, their healthchecks fail and say why (the gateway's passes)."""
    secrets = secrets_dir(tmp_path / "secrets")
    (secrets / "operator_token" / "operator_token").write_text(gateway.operator_token)
    (secrets / "worker_token").mkdir()  # the worker's view: its pool's secret, mounted as worker_token
    (secrets / "worker_token" / "worker_token").write_text(gateway.operator_token)
    env = {"KSWARM_URL": gateway.url}
    assert helper(gateway.redis_url, secrets, "health", "gateway", **env).returncode == 0
    orchestrator = helper(gateway.redis_url, secrets, "health", "orchestrator", **env)
    assert orchestrator.returncode == 1 and "orchestrator: not supervising" in orchestrator.stdout
    worker = helper(gateway.redis_url, secrets, "health", "worker", **env)
    assert worker.returncode == 1 and "worker: no live worker worker-cpu/" in worker.stdout
    down = helper(gateway.redis_url, secrets, "health", "worker", KSWARM_URL="http://127.0.0.1:9")
    assert down.returncode == 1 and down.stdout.startswith("gateway /healthz: HTTP 0")


def two_pool_spec(path: Path) -> Path:
    """compose's own spec with a second pool (``gpu``): its worker's token is what the cpu worker
    must never see."""
    spec = yaml.safe_load(SPEC.read_text())
    spec["pools"].append({"name": "gpu", "kind": "local", "device": "cpu", "workers": 0})
    path.write_text(yaml.safe_dump(spec))
    return path


def host_files_handed_to(service: str, secrets: Path, spec: Path) -> list[Path]:
    """Every host file ``service`` gets, as ``docker compose config`` resolves it for this secrets
    dir: its secrets (a file, or a dir and all under it) and its bind mounts."""
    command = compose_command()
    if command is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    env = {**os.environ, "KSWARM_SECRETS_DIR": str(secrets), "KSWARM_SPEC": str(spec)}
    done = subprocess.run(
        [*command, "-f", str(REPO / "compose.yaml"), "--profile", "embedded-forge", "config"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load(done.stdout)
    wanted = config["services"][service]
    sources = [
        Path(config["secrets"][s if isinstance(s, str) else s["source"]]["file"])
        for s in wanted.get("secrets") or []
    ]
    for volume in wanted.get("volumes") or []:
        source = volume.split(":")[0] if isinstance(volume, str) else volume.get("source", "")
        if source.startswith("/"):
            sources.append(Path(source))
    files: list[Path] = []
    for source in sources:
        files += [p for p in source.rglob("*") if p.is_file()] if source.is_dir() else [source]
    return [f for f in files if f.is_file()]


def test_attack_the_cpu_worker_cannot_read_another_pools_worker_token(
    clean_redis: str, tmp_path: Path
) -> None:
    """The cpu worker's container is nearly privileged (SYS_ADMIN) and runs jobs: whoever escapes a
    job there reads everything the service was handed. Try every file it gets as a token: none may
    be the token of another pool's worker (it would take that pool's jobs and post their results)."""
    secrets = secrets_dir(tmp_path / "secrets")
    spec = two_pool_spec(tmp_path / "swarm.yaml")
    done = helper(clean_redis, secrets, "init", KSWARM_SPEC_FILE=str(spec))
    assert done.returncode == 0, done.stderr
    holders = {}
    for path in host_files_handed_to("worker-cpu", secrets, spec):
        principal = verify(clean_redis, path.read_text(errors="replace").strip())
        if principal is not None:
            holders[str(path)] = principal.name
    assert set(holders.values()) == {"worker-cpu"}, holders  # its own token, and nothing else


@pytest.mark.parametrize("replaced_by", ["deleted", "garbage", "operator's token"])
def test_attack_a_replaced_worker_token_is_revoked_not_left_valid(
    gateway: GatewayThread, tmp_path: Path, replaced_by: str
) -> None:
    """A worker token that leaked (a copied secrets dir, a job that read it) is dealt with by deleting
    the file and starting again: the leaked token must then be refused by the gateway, not stay
    valid beside the new one. Whoever still holds it tries it as the attacker would."""
    secrets = secrets_dir(tmp_path / "secrets")
    (secrets / "operator_token" / "operator_token").write_text(gateway.operator_token)
    env = {"KSWARM_GATEWAY_SWARM": gateway.swarm}
    assert helper(gateway.redis_url, secrets, "init", **env).returncode == 0
    worker_file = worker_token_path(secrets, "cpu")
    leaked = worker_file.read_text().strip()
    assert gateway.client(leaked).get("/api/jobs/pools").status_code == 200
    if replaced_by == "deleted":
        worker_file.unlink()
    elif replaced_by == "garbage":
        worker_file.write_text("ksw_not-a-token\n")
    else:
        worker_file.write_text(gateway.operator_token)
    done = helper(gateway.redis_url, secrets, "init", **env)
    assert done.returncode == 0, done.stderr
    assert gateway.client(leaked).get("/api/jobs/pools").status_code == 401
    fresh = worker_file.read_text().strip()
    assert fresh != leaked
    assert gateway.client(fresh).get("/api/jobs/pools").status_code == 200
    assert "revoked" in done.stdout


def test_attack_the_operators_token_found_in_a_worker_secret_is_revoked_and_replaced(
    gateway: GatewayThread, tmp_path: Path
) -> None:
    """The operator's token in the worker's secret has been handed to the near-privileged worker
    container: it is exposed. init revokes it and gives the operator a new token (the orchestrator
    and the kick-off read the new file); the exposed one is refused from then on."""
    secrets = secrets_dir(tmp_path / "secrets")
    operator_file = secrets / "operator_token" / "operator_token"
    operator_file.write_text(gateway.operator_token)
    env = {"KSWARM_GATEWAY_SWARM": gateway.swarm}
    assert helper(gateway.redis_url, secrets, "init", **env).returncode == 0
    worker_token_path(secrets, "cpu").write_text(gateway.operator_token)
    done = helper(gateway.redis_url, secrets, "init", **env)
    assert done.returncode == 0, done.stderr
    assert gateway.client(gateway.operator_token).get("/api/principals").status_code == 401
    fresh = operator_file.read_text().strip()
    assert fresh != gateway.operator_token
    assert gateway.client(fresh).get("/api/principals").status_code == 200
    worker = verify(gateway.redis_url, worker_token_path(secrets, "cpu").read_text().strip())
    assert worker is not None and worker.name == "worker-cpu"


def test_the_compose_gateway_applies_the_spec_as_kswarm_up_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The spec's budgets, alert targets, task rules and leads reach compose's gateway (it once read its
    environment alone: a spec's budgets did nothing there), built by the same function ``kswarm up``
    uses; the pools are the spec's, without a warning that the spec replaces its own file."""
    import importlib.util

    from gateway.jobs.plugin import JobsPlugin
    from gateway.llm.plugin import LLMProxyPlugin
    from gateway.monitor.plugin import MonitorPlugin
    from gateway.tasks.plugin import TasksPlugin

    raw = yaml.safe_load(SPEC.read_text())
    raw["budgets"] = {"agent": {"usd": 3}, "swarm": {"usd_per_day": 40}}
    raw["alerts"] = [{"name": "ops", "kind": "slack", "url": "https://hooks.example/T000/SECRET"}]
    spec = tmp_path / "swarm.yaml"
    spec.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("KSWARM_SPEC_FILE", str(spec))
    monkeypatch.setenv("KSWARM_JOBS_POOLS_FILE", str(spec))
    loader = importlib.util.spec_from_file_location("kswarm_compose_under_test", HELPER)
    assert loader is not None and loader.loader is not None
    compose = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(compose)

    plugins = {type(p): p for p in compose.gateway_plugins()}
    llm = plugins[LLMProxyPlugin].settings
    assert llm.budgets.agent.usd == 3 and llm.budgets.swarm.usd_per_day == 40
    alerts = plugins[MonitorPlugin].settings.alerts
    assert [(a.name, a.url.get_secret_value()) for a in alerts] == [
        ("ops", "https://hooks.example/T000/SECRET")
    ]
    leads = [a["name"] for a in raw["agents"] if a.get("role") == "lead"]
    assert set(leads) <= set(plugins[TasksPlugin].settings.leads)
    assert [p.name for p in plugins[JobsPlugin].settings.pools] == [
        p["name"] for p in raw.get("pools", [{"name": "cpu"}])
    ]
    assert "replace" not in capsys.readouterr().out
