"""compose.yaml's helper, one command per job (``python /opt/kswarm/compose/kswarm_compose.py CMD``):

- ``init``: wait for Redis, then make the operator and one worker principal per pool of the spec and
  write their tokens into the secrets dirs -- once: a token that still verifies is kept, so restarts
  and ``docker compose up`` again change nothing. Nothing has an empty default: no token exists until
  this ran, and the services that need one refuse to start without it.
- ``gateway`` / ``orchestrator`` / ``worker``: read this service's secret files, put what the process
  needs where it reads it (the model key in the gateway's own environment, never in the container's
  configuration: ``docker inspect`` shows no secret), wait for what it depends on, then run it (the
  gateway with the components ``kswarm up`` builds for the spec: its budgets, alerts, task rules).
- ``kickoff``: seed the dataset repo's tasks and the knowledge base, protect ``main``, and send the
  lead its kick-off once; then watch until the first pull request is merged and say so.
- ``health SERVICE``: the healthcheck; the gateway's ``/healthz`` (200 only when every component is
  healthy; 503/507 name what is not) for every service that talks to the gateway, plus the
  orchestrator's heartbeat and the worker's lease of its pool's node.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

SECRETS = Path(os.environ.get("KSWARM_SECRETS", "/run/secrets"))
SPEC = Path(os.environ.get("KSWARM_SPEC_FILE", "/etc/kswarm/swarm.yaml"))
REDIS_URL = os.environ.get("KSWARM_GATEWAY_REDIS_URL", "unix:///run/kswarm-redis/redis.sock")
STATE = Path(os.environ.get("KSWARM_COMPOSE_STATE", "/var/lib/kswarm-state"))
GATEWAY_SOCKET = Path(os.environ.get("KSWARM_GATEWAY_UNIX_SOCKET", "/run/kswarm-gateway/gateway.sock"))
WAIT_NOTE_S = 15.0


def say(text: str) -> None:
    print(f"[kswarm] {text}", flush=True)


def gateway_url() -> str:
    port = os.environ.get("KSWARM_GATEWAY_PORT", "8765")
    return os.environ.get("KSWARM_URL") or f"http://127.0.0.1:{port}"


def secret(name: str, required: bool = True, label: str | None = None) -> str | None:
    """The secret ``name`` (compose mounts each as a dir holding one file of the same name; ``name``
    may also be ``dir/file``). A required one that is missing or empty ends the service: no service
    runs with an empty token."""
    path = SECRETS / name if "/" in name else SECRETS / name / name
    try:
        value = path.read_text().strip()
    except OSError:
        value = ""
    if not value and required:
        sys.exit(
            f"kswarm: no {label or name} at {path}: the init service writes it on first start (see its log)"
        )
    return value or None


def healthz(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=timeout) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)


def wait_for_gateway(url: str) -> None:
    """Until ``/healthz`` answers 200; one line now and then, not one per try."""
    noted = 0.0
    while True:
        code, body = healthz(url)
        if code == 200:
            return
        if time.monotonic() - noted > WAIT_NOTE_S:
            why = f"HTTP {code}: {body[:200]}" if code else "no answer"
            say(
                f"waiting for the gateway at {url} ({why}); is a forge profile on (--profile embedded-forge)?"
            )
            noted = time.monotonic()
        time.sleep(1)


def pools() -> list[str]:
    import yaml

    raw = yaml.safe_load(SPEC.read_text()) or {}
    return [str(p["name"]) for p in raw.get("pools") or []]


def worker_secret(pool: str) -> str:
    """The compose secret of ``pool``'s worker token (``worker_token_<pool>``): one per pool, so that
    each worker service is handed its own pool's token and no other (compose.yaml mounts it in that
    service alone, at ``/run/secrets/worker_token/``)."""
    from gateway.client.jobs.pools import worker_principal

    return "worker_token_" + worker_principal(pool).removeprefix("worker-")


def worker_token_file(pool: str) -> Path:
    """Where init writes the token of ``pool``'s worker principal (``worker-<pool>``): the file
    ``worker_token`` in the pool's own secret dir."""
    return SECRETS / worker_secret(pool) / "worker_token"


def init() -> None:
    """The operator's token and one token per pool of the spec, each of a principal of the right kind
    (a worker's bound to its pool, as ``kswarm worker token`` makes it); a kept token must still
    verify as that very principal, or it is replaced -- and what it replaces is revoked: every old
    token of that principal (whoever copied the file keeps nothing that works), and a token of another
    principal found in the file (it was handed to a service it is not for: exposed). A name taken by
    a principal of another kind is refused: the deployment does not start with a token that is not
    what it says."""
    import asyncio

    from redis.asyncio import Redis

    from gateway.client.home import write_secret
    from gateway.client.jobs.pools import worker_principal
    from gateway.jobs.queue import JobQueue
    from gateway.principals import PrincipalKind, PrincipalStore

    swarm = os.environ.get("KSWARM_GATEWAY_SWARM", "kswarm")

    def kept(path: Path) -> str:
        return path.read_text().strip() if path.is_file() else ""

    async def principal_of(store: PrincipalStore, name: str, kind: PrincipalKind) -> str | None:
        """Make sure ``name`` is an enabled principal of ``kind``; its first token if just created."""
        principal, token = await store.ensure(name, kind)
        if principal.kind != kind or principal.disabled:
            state = "disabled" if principal.disabled else f"of kind {principal.kind.value}"
            sys.exit(f"kswarm: principal {name} is {state}, not an enabled {kind.value}: no token written")
        return token

    async def revoke_misplaced(store: PrincipalStore, name: str, path: Path) -> None:
        token = kept(path)
        holder = await store.verify(token) if token else None
        if holder is not None and holder.name != name and await store.revoke_token(token):
            say(
                f"revoked a token of {holder.name} found in the {path.parent.name} secret "
                "(it was exposed there)"
            )

    async def ensure(
        store: PrincipalStore, name: str, kind: PrincipalKind, token: str | None, path: Path
    ) -> None:
        if token is None:
            token = kept(path)
            holder = await store.verify(token) if token else None
            if holder is not None and holder.name == name:
                return
            revoked = await store.revoke_tokens(name)
            token = await store.issue_token(name)
            note = f"; revoked its {revoked} old token(s)" if revoked else ""
        else:
            note = ""
        if not path.parent.is_dir():
            path.parent.mkdir(parents=True)
            say(
                f"made the secret dir {path.parent.name}: compose.yaml needs that secret and a worker "
                "service to use it (docs/deploy.md, Secrets)"
            )
        write_secret(path, token)
        say(f"generated the {kind.value} token of {name} ({path.parent.name} secret){note}")

    async def main() -> None:
        redis = Redis.from_url(REDIS_URL, decode_responses=True)
        try:
            noted = 0.0
            while True:
                try:
                    await redis.ping()
                    break
                except OSError as exc:
                    if time.monotonic() - noted > WAIT_NOTE_S:
                        say(f"waiting for Redis at {REDIS_URL} ({exc})")
                        noted = time.monotonic()
                    await asyncio.sleep(0.5)
            store = PrincipalStore(redis, swarm)
            wanted = [("operator", PrincipalKind.operator, SECRETS / "operator_token" / "operator_token")]
            wanted += [(worker_principal(p), PrincipalKind.worker, worker_token_file(p)) for p in pools()]
            # First every principal checked (nothing written if one is refused), then every token
            # that sits in another principal's file revoked (so that its own file, if it holds it
            # too, is replaced below), then each file kept or replaced.
            first = {name: await principal_of(store, name, kind) for name, kind, _ in wanted}
            for name, _, path in wanted:
                await revoke_misplaced(store, name, path)
            for name, kind, path in wanted:
                await ensure(store, name, kind, first[name], path)
            queue = JobQueue(redis)
            for pool in pools():
                await queue.bind_worker(worker_principal(pool), pool)  # its token takes this pool's jobs only
        finally:
            await redis.aclose()

    asyncio.run(main())
    if not (SECRETS / "model_key" / "model_key").is_file():
        say(
            "no model key (secrets/model_key/model_key): agents on a real model are refused by the proxy; "
            "scripted agents need none"
        )


def gateway_plugins() -> list[Any]:
    """The gateway's components as ``kswarm up`` makes them for the spec (orchestrator/local/launcher.py:
    ``spec_plugins``): its budgets, alert targets, task rules and leads, and pools -- not only what the
    environment says. Exits with one line when the spec or a setting is bad."""
    from orchestrator.local.launcher import LaunchError, llm_settings, spec_plugins
    from orchestrator.spec import SpecError, load_spec

    try:
        spec = load_spec(SPEC)
        if os.environ.get("KSWARM_JOBS_POOLS_FILE") == str(SPEC):
            del os.environ["KSWARM_JOBS_POOLS_FILE"]  # the same pools, read from the spec below
        llm, warnings = llm_settings(spec)
        plugins, more = spec_plugins(spec, llm)
    except (SpecError, LaunchError) as exc:
        sys.exit(f"kswarm: {exc}")
    for warning in warnings + more:
        say(f"note: {warning}")
    return plugins


def run_gateway() -> None:
    import uvloop
    from pydantic import ValidationError

    from gateway.__main__ import settings_error
    from gateway.app import create_app
    from gateway.config import GatewaySettings
    from gateway.logs import configure_logging
    from gateway.server import serve

    key = secret("model_key", required=False)
    if key and os.environ.get("KSWARM_LLM_API_KEY") != key:
        # The key in this process's own environment only, never the container's configuration: the
        # helper runs itself again with it (exec), so the gateway's process is the one that has it.
        env = {**os.environ, "KSWARM_LLM_API_KEY": key}
        os.execvpe(sys.executable, [sys.executable, str(Path(__file__).resolve()), "gateway"], env)
    configure_logging()
    try:
        settings = GatewaySettings()
        app = create_app(settings, plugins=gateway_plugins())
    except ValidationError as exc:
        sys.exit(settings_error("KSWARM_GATEWAY_*/component", exc))
    uvloop.run(serve(app, settings, freeze_heap=True))


def run_orchestrator() -> None:
    """The supervisor until compose stops it (SIGTERM), then every agent's container and volumes
    removed (their files stay in the orchestrator-home volume), so that `down` leaves no container."""
    import signal
    import threading

    from orchestrator.runtime.docker import DockerSetupError
    from orchestrator.spec import load_spec
    from orchestrator.supervisor.main import Supervisor, stop_swarm
    from orchestrator.swarm_dir.provision import SwarmLayout

    token = secret("operator_token") or ""
    url = gateway_url()
    wait_for_gateway(url)
    home = Path(os.environ.get("KSWARM_HOME", "/var/lib/kswarm"))
    spec = load_spec(SPEC)
    try:
        supervisor = Supervisor(
            spec, "docker", home, url, token, GATEWAY_SOCKET, redis_url=REDIS_URL if REDIS_URL else None
        )
    except DockerSetupError as exc:  # one line per restart, not a traceback (mount the daemon's socket)
        sys.exit(f"kswarm: {exc}")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    say(f"supervising swarm {spec.swarm} ({len(spec.expand())} agents) on the docker backend")
    try:
        supervisor.run(stop)
    finally:
        names = stop_swarm(SwarmLayout(home), supervisor.runtime, purge=False)
        say(f"stopped and removed {len(names)} agent container(s); their files stay in the home volume")


def run_worker() -> None:
    pool = os.environ.get("KSWARM_POOL", "cpu")
    token_file = SECRETS / "worker_token" / "worker_token"  # this pool's secret, mounted as worker_token
    secret("worker_token")
    wait_for_gateway(gateway_url())
    argv = [sys.executable, "-m", "orchestrator.worker", "--pool", pool, "--gateway", gateway_url()]
    argv += [
        "--token-file",
        str(token_file),
        "--workdir",
        os.environ.get("KSWARM_WORKDIR", "/var/lib/kswarm-jobs"),
    ]
    os.execvp(sys.executable, argv)


def kickoff() -> None:
    """The first run's stage (what ``kswarm demo`` does as the operator), once per deployment."""
    import yaml

    from gateway.client import GatewayCallError, GatewayClient, GatewayTarget

    token = secret("operator_token")
    url = gateway_url()
    wait_for_gateway(url)
    api = GatewayClient(GatewayTarget(token=token, url=url, timeout=60))
    spec = yaml.safe_load(SPEC.read_text()) or {}
    org = spec.get("swarm", "kswarm")
    repo = os.environ.get("KSWARM_DATASET_REPO", f"{org}/dataset")
    tasks = [t for t in os.environ.get("KSWARM_KICKOFF_TASKS", "add").split(",") if t]
    agents = spec.get("agents") or []
    lead = next((a["name"] for a in agents if a.get("role") == "lead"), None)
    marker = STATE / "kickoff.json"
    if marker.exists():
        say(f"kick-off already sent ({marker}); watching for merges")
    elif tasks and lead:
        while not any(f"{r.get('org')}/{r.get('name')}" == repo for r in api.get("/api/forge/repos")):
            time.sleep(1)  # the supervisor makes the spec's repos
        api.request("POST", "/api/tasks/seed", json={"repo": repo, "post_tasks": False})
        api.request("POST", "/api/kb/seed")
        review = spec.get("review") or {}
        policy = {
            "required_approvals": review.get("required_approvals", 1),
            "required_checks": review.get("required_checks", ["kswarm/verify:cpu"]),
            "protected_branches": ["main"],
            "dataset": True,
        }
        api.request("PUT", f"/api/forge/repos/{repo}/policy", json=policy)
        developers = [a["name"] for a in agents if a.get("role") == "developer"]
        reviewers = [a["name"] for a in agents if a.get("role") == "reviewer"]
        text = (
            f"Kick-off: post these tasks for {repo} on the board and get the team going. "
            f"Tasks: {', '.join(tasks)}. Developers: {', '.join(developers)}. "
            f"Reviewers: {', '.join(reviewers)}. Every kernel is verified by a job and merged only "
            "with a reviewer's approval."
        )
        api.request("POST", f"/api/dms/{lead}/messages", json={"text": text})
        STATE.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"tasks": tasks, "lead": lead, "at": time.time()}))
        say(f"kick-off sent to {lead}: tasks {', '.join(tasks)} for {repo}")
    seen: set[int] = set()
    while True:
        try:
            prs = api.get("/api/forge/pulls", repo=repo, state="all")
        except GatewayCallError as exc:
            say(f"cannot list pull requests: {exc}")
            time.sleep(5)
            continue
        for pr in prs if isinstance(prs, list) else []:
            number = int(pr.get("number", 0))
            if pr.get("state") == "merged" and number not in seen:
                seen.add(number)
                say(
                    f"PR #{number} merged into {repo} as {str(pr.get('merge_sha'))[:10]}: "
                    f"{pr.get('title')} by {pr.get('author') or pr.get('user')} (verified and reviewed)"
                )
        if seen and os.environ.get("KSWARM_KICKOFF_EXIT", "1") == "1":
            return
        time.sleep(2)


def api_get(path: str, token: str) -> tuple[int, object]:
    """``GET path`` as the holder of ``token`` (through the one client): (status, JSON or why not)."""
    from gateway.client import GatewayCallError, GatewayClient, GatewayTarget

    try:
        return 200, GatewayClient(GatewayTarget(token=token, url=gateway_url(), timeout=5)).get(path)
    except GatewayCallError as exc:
        return exc.status, str(exc)[:300]


def unhealthy(why: str) -> None:
    print(why)
    sys.exit(1)


def health(service: str) -> None:
    """0 when ``service`` itself is healthy, not only the gateway: the gateway's ``/healthz`` (200 only
    when every component is; 503/507 name the one that is not), and then what the service does --
    the orchestrator's heartbeat is current (``GET /api/swarm``: supervising), the worker holds its
    pool's node lease (``GET /api/jobs/pools``: a live worker of its principal on this host)."""
    if service == "secrets":
        sys.exit(0 if (SECRETS / "operator_token" / "operator_token").is_file() else 1)
    if service == "redis":
        sock = REDIS_URL.removeprefix("unix://")
        done = subprocess.run(["redis-cli", "-s", sock, "ping"], capture_output=True, text=True)
        sys.exit(0 if done.stdout.strip() == "PONG" else 1)
    code, body = healthz(gateway_url())
    if code != 200:
        unhealthy(f"gateway /healthz: HTTP {code} {body[:300]}")
    if service == "orchestrator":
        code, report = api_get("/api/swarm", secret("operator_token") or "")
        if code != 200 or not isinstance(report, dict) or not report.get("supervising"):
            why = report.get("reason") if isinstance(report, dict) else report
            unhealthy(f"orchestrator: not supervising (HTTP {code}: {why})")
    if service == "worker":
        import socket

        from gateway.client.jobs.pools import worker_principal

        pool = os.environ.get("KSWARM_POOL", "cpu")
        code, pools = api_get("/api/jobs/pools", secret("worker_token") or "")
        mine = f"{worker_principal(pool)}/{socket.gethostname()[:24]}-"
        views = [p for p in pools if isinstance(p, dict)] if isinstance(pools, list) else []
        live = [w for p in views if p.get("pool") == pool for w in p.get("workers") or []]
        if not any(str(w.get("worker", "")).startswith(mine) for w in live):
            unhealthy(f"worker: no live worker {mine}* in pool {pool} (HTTP {code}; live: {live})")
    sys.exit(0)


def main(argv: list[str]) -> None:
    commands = {
        "init": init,
        "gateway": run_gateway,
        "orchestrator": run_orchestrator,
        "worker": run_worker,
        "kickoff": kickoff,
    }
    # Each service runs as its container's pid 1, to which the kernel delivers no signal it has no
    # handler for: without this, `docker compose down` waited out the stop timeout (90 s) on the kick-off
    # and killed it. The orchestrator sets its own handlers (it stops the agents first).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if len(argv) >= 2 and argv[1] == "health":
        health(argv[2] if len(argv) > 2 else "gateway")
    elif len(argv) == 2 and argv[1] in commands:
        commands[argv[1]]()
    else:
        sys.exit(f"usage: kswarm_compose.py {{{','.join(commands)}}} | health SERVICE")


if __name__ == "__main__":
    main(sys.argv)
