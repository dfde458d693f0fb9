"""schemathesis against ``/openapi.json`` of a real gateway with every default plugin.

Every operation, once with an operator token and once with an agent token, 20 generated requests each
(derandomized: the same requests every run, so a known failure stays known): no answer may be a 5xx,
and every answer must match the schema the gateway publishes (its status declared, its body of the
declared shape). The gateway is real (uvicorn in a thread, real Redis, the default plugins); the model
upstream behind the LLM proxy is the test upstream (the only fake).

Every operation is fuzzed the same way, the Gitea-compatible ones under ``/api/v1`` included (they are
in the schema: their parameters and Gitea's error shape are declared like the rest). Generated examples
alone missed a 500 (``GET /api/v1/repos/{owner}/{repo}/contents/%00``: twenty random file paths never
held a NUL), so each operation also gets the classic attacks as explicit requests (``ATTACKS``: a NUL,
``..``, an option, git revision syntax, an overlong value, a newline) in every string parameter of its
path and query, the others naming real things.

Each operation is its own test item, so an operation that fails in code this suite's owner does not own
carries an ``xfail(strict=True)`` naming the case (``KNOWN_FAILURES``) until its owner fixes it.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import redis as redis_sync
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis.strategies import one_of
from redis.asyncio import Redis
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from gateway.principals import PrincipalKind, PrincipalStore
from kstest.gateway import GatewayThread
from kstest.upstream import ScriptedUpstream

pytestmark = pytest.mark.slow

EXAMPLES = 20
KINDS = ("operator", "agent")
METHOD_ORDER = ("GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE")
# Endless by design: an SSE stream answers 200 and then never ends, so one example would hang the run.
# Their parameters (Last-Event-ID, last_event_id, channel) are attacked by test_stream_ids.py and below.
EXCLUDED = {
    ("GET", "/api/events"): "SSE stream (endless by design)",
    ("GET", "/ui/events"): "SSE stream (endless by design)",
    ("GET", "/api/agents/{name}/timeline/events"): "SSE stream (endless by design)",
    ("GET", "/ui/agents/{name}/timeline/events"): "SSE stream (endless by design)",
}
SETTINGS: dict[str, Any] = {
    "max_examples": EXAMPLES,
    "derandomize": True,  # the same requests every run: a known failure stays known, a pass stays a pass
    "database": None,
    "deadline": None,
    "phases": [Phase.explicit, Phase.generate],  # no shrinking: the first failing request is reported
    "suppress_health_check": list(HealthCheck),
}
# What a misbehaving client puts in a string parameter: each is sent, explicitly, in every string path
# and query parameter of every operation (the generated examples rarely hold one). A bare ".." is not:
# in a path, the client resolves it away into another operation's URL.
ATTACKS = [
    "\x00",
    "a\x00b",
    "../../../etc/passwd",
    "-",
    "--upload-pack=touch /tmp/pwned",
    "main:README.md",
    "HEAD~1",
    "a\nb",
    "x" * 5000,
]
# (token kind, method, path) -> the failing request, for the owner of that code to fix (then remove).
KNOWN_FAILURES: dict[tuple[str, str, str], str] = {}


def app_operations() -> list[tuple[str, str]]:
    """The operations of the gateway as ``python -m gateway`` builds it (no server, nothing connected)."""
    from gateway.app import create_app
    from gateway.config import GatewaySettings
    from gateway.plugins import default_plugins

    home = Path(tempfile.mkdtemp(prefix="kso"))
    try:
        app = create_app(
            GatewaySettings(home=home, redis_url="redis://127.0.0.1:1/0"), plugins=default_plugins()
        )
        paths = app.openapi()["paths"]
    finally:
        shutil.rmtree(home, ignore_errors=True)
    # Reads before writes, deletions last: what one operation deletes, the next ones could not find.
    found = [(method.upper(), path) for path, item in paths.items() for method in item]
    return sorted(found, key=lambda op: (METHOD_ORDER.index(op[0]), op[1]))


def operation_params() -> list[Any]:
    params = []
    for kind in KINDS:
        for method, path in app_operations():
            marks: list[Any] = []
            if (method, path) in EXCLUDED:
                marks.append(pytest.mark.skip(reason=EXCLUDED[(method, path)]))
            elif (kind, method, path) in KNOWN_FAILURES:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[(kind, method, path)]))
            params.append(pytest.param(kind, method, path, id=f"{kind}:{method} {path}", marks=marks))
    return params


@dataclass
class LiveGateway:
    gateway: GatewayThread
    schema: Any  # schemathesis' loaded schema of the live /openapi.json
    names: Iterator[int]
    known: dict[str, str]  # path parameter -> a value that names something real (else all is a 404)

    def fresh_token(self, kind: str) -> str:
        """A new principal of ``kind`` for one operation's run: what earlier runs revoked or disabled
        (the operator may revoke any token, including the ones this suite uses) cannot blind this one."""
        name = f"st-{kind}-{next(self.names)}"

        async def create() -> str:
            redis = Redis.from_url(self.gateway.redis_url, decode_responses=True)
            try:
                _, token = await PrincipalStore(redis, self.gateway.swarm).create(name, PrincipalKind(kind))
                return token
            finally:
                await redis.aclose()

        return asyncio.run(create())


@pytest.fixture(scope="module")
def live(redis_url: str) -> Iterator[LiveGateway]:
    client = redis_sync.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    upstream = ScriptedUpstream().start()
    home = Path(tempfile.mkdtemp(prefix="kss"))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KSWARM_LLM_UPSTREAM_URL", upstream.url)
        env.setenv("KSWARM_LLM_API_KEY", "sk-test-upstream-key")
        env.setenv("KSWARM_LLM_MAX_RETRIES", "0")
        # A short inbox wait cap: /api/inbox?wait= stays in the run without an example sleeping a minute.
        gw = GatewayThread(home / "home", redis_url, inbox_max_wait=0.05)
        gw.start()
    try:
        yield LiveGateway(
            gw, schemathesis.openapi.from_url(f"{gw.url}/openapi.json"), itertools.count(), seed(gw)
        )
    finally:
        gw.stop()
        upstream.stop()
        shutil.rmtree(home, ignore_errors=True)


def seed(gw: GatewayThread) -> dict[str, str]:
    """Things for requests to find -- a thread, a DM, a peer, tasks, the forge's kb repo -- by name."""
    peer = "st-peer"
    gw.add_principal(peer)
    with gw.client(gw.operator_token) as op:
        root = op.post("/api/channels/general/messages", json={"text": "hello @st-peer"}).json()
        op.post("/api/channels/general/messages", json={"text": "hi", "reply_to": root["id"]})
        op.post(f"/api/dms/{peer}/messages", json={"text": "psst"})
        op.post("/api/tasks/seed", json={}).raise_for_status()
        tasks = op.get("/api/tasks").json()
        kb = op.get("/api/kb").json()
    org, repo = kb["repo"].split("/")
    return {
        "channel": "general",
        "root_id": root["id"],
        "peer": peer,
        "name": peer,
        "username": peer,
        "user": peer,
        "org": org,
        "owner": org,
        "repo": repo,
        "branch": kb["branch"],
        "ref": kb["branch"],
        "sha": kb["commit"],
        "path": kb["files"][0],
        "pool": "cpu",
        "task_id": tasks[0]["id"] if tasks else "none",
        "number": "1",
        "index": "1",
        "action": "snapshot",
        "filepath": kb["files"][0],
        "basehead": f"{kb['branch']}...{kb['branch']}",
    }


# Where a parameter's name means another thing in the Gitea-compatible routes: a branch protection's
# ``name`` is a branch, not a principal.
GITEA_KNOWN = {"name": "branch"}


def known_for(live: LiveGateway, path: str, names: list[str]) -> dict[str, str]:
    """Values of ``names`` (path parameters of ``path``) that name something real, where known."""
    aliases = GITEA_KNOWN if path.startswith("/api/v1/") else {}
    return {n: live.known[aliases.get(n, n)] for n in names if aliases.get(n, n) in live.known}


def test_every_operation_is_collected(live: LiveGateway) -> None:
    """The items below come from an app built at collection; the live gateway serves the same ones."""
    served = {(m.upper(), p) for p, item in live.schema.raw_schema["paths"].items() for m in item}
    assert served == set(app_operations())


@pytest.mark.parametrize(("kind", "method", "path"), operation_params())
def test_operation(live: LiveGateway, kind: str, method: str, path: str) -> None:
    operation = live.schema[path][method]
    headers = {"Authorization": f"Bearer {live.fresh_token(kind)}"}

    settings = hypothesis.settings(**SETTINGS)

    def run(case: Any) -> None:
        case.call_and_validate(
            base_url=live.gateway.url,
            headers=headers,
            checks=[not_a_server_error, response_schema_conformance],
            timeout=30,
        )

    # Half the requests name real things in the path (else a route's code behind its 404 is never run).
    raw = live.schema.raw_schema["paths"][path][method.lower()]
    in_path = [p["name"] for p in raw.get("parameters", []) if p["in"] == "path"]
    real = known_for(live, path, in_path)
    cases = operation.as_strategy()
    if real:
        cases = one_of(cases, operation.as_strategy(path_parameters=real))
    settings(given(case=cases)(run))()
    # Then requests the schema forbids (wrong types, missing fields, out of range): a 4xx, never a 5xx.
    # Once, as the operator: validation does not depend on who asks, and an agent's request to an
    # operator's route is refused before its content is looked at.
    if kind == "operator" and negatable(raw):
        settings(given(case=operation.as_strategy(generation_mode=GenerationMode.NEGATIVE))(run))()
    # Then the classic attacks, one explicit request each: a 4xx, never a 5xx, as the schema declares.
    for case in attack_cases(operation, raw, in_path, real):
        run(case)


def string_parameter(param: dict[str, Any]) -> bool:
    schema = param.get("schema", {})
    return "string" in {schema.get("type")} | {alt.get("type") for alt in schema.get("anyOf", [])}


def attack_cases(operation: Any, raw: dict[str, Any], in_path: list[str], real: dict[str, str]) -> list[Any]:
    """One case per string parameter (path or query) and attack; other path parameters name real things
    (else a placeholder that is well formed everywhere), so the attack reaches the route's own code."""
    base = {name: real.get(name, "x1") for name in in_path}
    cases = []
    for param in raw.get("parameters", []):
        if param["in"] not in ("path", "query") or not string_parameter(param):
            continue
        for bad in ATTACKS:
            if param["in"] == "path":
                cases.append(operation.Case(path_parameters=base | {param["name"]: bad}))
            else:
                cases.append(operation.Case(path_parameters=base, query={param["name"]: bad}))
    return cases


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("path", sorted(p for _, p in EXCLUDED))
def test_stream_parameters(live: LiveGateway, kind: str, path: str) -> None:
    """The SSE routes' parameters, fuzzed like the rest: each stream is closed as soon as it opens (a
    200 of ``text/event-stream``); any other answer is read whole and checked like any operation's."""
    operation = live.schema[path]["GET"]
    headers = {"Authorization": f"Bearer {live.fresh_token(kind)}"}

    @hypothesis.settings(**SETTINGS)
    @given(
        case=one_of(operation.as_strategy(), operation.as_strategy(generation_mode=GenerationMode.NEGATIVE))
    )
    def run(case: Any) -> None:
        request = case.as_transport_kwargs(base_url=live.gateway.url, headers=headers)
        with requests.request(**request, stream=True, timeout=10) as response:
            if response.status_code == 200:
                assert response.headers["content-type"].startswith("text/event-stream")
                return
            response.content  # noqa: B018 -- read the (short) error body before it is checked
            case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])

    run()


def negatable(operation: dict[str, Any]) -> bool:
    """Whether a request can break this operation's schema (else negative generation finds nothing and
    spends its whole budget saying so): a body, or a parameter that is required, not a string, or bounded."""
    if "requestBody" in operation:
        return True
    for param in operation.get("parameters", []):
        schema = param.get("schema", {})
        kinds = {schema.get("type")} | {alt.get("type") for alt in schema.get("anyOf", [])}
        bounded = set(schema) & {"enum", "pattern", "minimum", "maximum", "minLength", "maxLength"}
        if (param.get("required") and param["in"] != "path") or kinds - {"string", "null", None} or bounded:
            return True
    return False
