"""compose.yaml's helper, one command per job (``python /opt/kswarm/compose/kswarm_compose.py CMD``):

- ``init``: wait for Redis, then make the operator and one worker principal per pool of the spec and
  write their tokens into the secrets dirs -- once: a token that still verifies is kept, so restarts
  and ``docker compose up`` again change nothing. Nothing has an empty default: no token exists until
  this ran, and the services that need one refuse to start without it.
- ``gateway`` / ``orchestrator`` / ``worker``: read this service's secret files, put what the process
  needs where it reads it (the model key in the gateway's own environment, never in the container's
  configuration: ``docker inspect`` shows no secret), wait for what it depends on, then ``exec`` it.
- ``kickoff``: seed the dataset repo's tasks and the knowledge base, protect ``main``, and send the
  lead its kick-off once; then watch until the first pull request is merged and say so.
- ``health SERVICE``: the healthcheck; the gateway's ``/healthz`` (200 only when every component is
  healthy; 503/507 name what is not) for every service that talks to the gateway.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

SECRETS = Path(os.environ.get("KSWARM_SECRETS", "/run/secrets"))
SPEC = Path(os.environ.get("KSWARM_SPEC_FILE", "/etc/kswarm/swarm.yaml"))
REDIS_URL = os.environ.get("KSWARM_GATEWAY_REDIS_URL", "unix:///run/kswarm-redis/redis.sock")
STATE = Path(os.environ.get("KSWARM_COMPOSE_STATE", "/var/lib/kswarm-state"))
WAIT_NOTE_S = 15.0


def say(text: str) -> None:
    print(f"[kswarm] {text}", flush=True)


def gateway_url() -> str:
    port = os.environ.get("KSWARM_GATEWAY_PORT", "8765")
    return os.environ.get("KSWARM_URL") or f"http://127.0.0.1:{port}"


def secret(name: str, required: bool = True) -> str | None:
    """The secret ``name`` (compose mounts each as a dir holding one file of the same name)."""
    path = SECRETS / name / name
    try:
        value = path.read_text().strip()
    except OSError:
        value = ""
    if not value and required:
        sys.exit(f"kswarm: no {name} at {path}: the init service writes it on first start (see its log)")
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


def init() -> None:
    import asyncio

    from redis.asyncio import Redis

    from gateway.client.home import write_secret
    from gateway.principals import PrincipalKind, PrincipalStore

    swarm = os.environ.get("KSWARM_GATEWAY_SWARM", "kswarm")

    async def ensure(store: PrincipalStore, name: str, kind: PrincipalKind, path: Path) -> None:
        kept = path.read_text().strip() if path.exists() else ""  # noqa: ASYNC240 - a one-shot init
        if kept and await store.verify(kept) is not None:
            return
        _, token = await store.ensure(name, kind)
        write_secret(path, token or await store.issue_token(name))
        say(f"generated the {kind.value} token of {name} ({path.parent.name} secret)")

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
            await ensure(
                store, "operator", PrincipalKind.operator, SECRETS / "operator_token" / "operator_token"
            )
            for pool in pools():
                await ensure(
                    store, f"worker-{pool}", PrincipalKind.worker, SECRETS / "worker_token" / "worker_token"
                )
        finally:
            await redis.aclose()

    asyncio.run(main())
    if not (SECRETS / "model_key" / "model_key").is_file():
        say(
            "no model key (secrets/model_key/model_key): agents on a real model are refused by the proxy; "
            "scripted agents need none"
        )


def run_gateway() -> None:
    key = secret("model_key", required=False)
    env = dict(os.environ)
    if key:
        env["KSWARM_LLM_API_KEY"] = key  # this process's environment only, not the container's config
    os.execvpe(sys.executable, [sys.executable, "-m", "gateway"], env)


def run_orchestrator() -> None:
    env = dict(os.environ, KSWARM_TOKEN=secret("operator_token") or "")
    wait_for_gateway(gateway_url())
    argv = [sys.executable, "-m", "orchestrator.supervisor", "-f", str(SPEC), "--backend", "docker"]
    os.execvpe(sys.executable, argv, env)


def run_worker() -> None:
    token_file = SECRETS / "worker_token" / "worker_token"
    secret("worker_token")
    pool = os.environ.get("KSWARM_POOL", "cpu")
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

    from gateway.client import GatewayClient, GatewayError, GatewayTarget

    url = gateway_url()
    wait_for_gateway(url)
    api = GatewayClient(GatewayTarget(token=secret("operator_token"), url=url, timeout=60))
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
            "required_approvals": review.get("approvals", 1),
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
        except GatewayError as exc:
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


def health(service: str) -> None:
    if service == "redis":
        sock = REDIS_URL.removeprefix("unix://")
        done = subprocess.run(["redis-cli", "-s", sock, "ping"], capture_output=True, text=True)
        sys.exit(0 if done.stdout.strip() == "PONG" else 1)
    code, body = healthz(gateway_url())
    if code != 200:
        print(f"gateway /healthz: HTTP {code} {body[:300]}")
        sys.exit(1)
    sys.exit(0)


def main(argv: list[str]) -> None:
    commands = {
        "init": init,
        "gateway": run_gateway,
        "orchestrator": run_orchestrator,
        "worker": run_worker,
        "kickoff": kickoff,
    }
    if len(argv) >= 2 and argv[1] == "health":
        health(argv[2] if len(argv) > 2 else "gateway")
    elif len(argv) == 2 and argv[1] in commands:
        commands[argv[1]]()
    else:
        sys.exit(f"usage: kswarm_compose.py {{{','.join(commands)}}} | health SERVICE")


if __name__ == "__main__":
    main(sys.argv)
