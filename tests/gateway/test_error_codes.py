"""The error vocabulary, unit by unit: every error class answered by the one REST handler with its
status and its code, FastAPI's own answers with theirs, and an exception that is not a refusal (a
library's ``ValueError`` included) a logged 500 that says nothing of itself. No Redis, no server: the
handler on a bare app."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field

from gateway.error_shapes import VALIDATION_CODE, install_error_handler
from gateway.errors import (
    CODES,
    INTERNAL_MESSAGE,
    STATUS_CODES,
    BadMessageId,
    BadRequest,
    BoardError,
    BooksBusy,
    BudgetRefused,
    ChatError,
    CounterexampleError,
    Forbidden,
    ForgeError,
    GatewayError,
    JobError,
    NotFound,
    PrincipalError,
    ProxyError,
    RuleViolation,
    TooManyWaits,
    UiAuthError,
    Unauthorized,
)
from gateway.redis_pool import RedisBusy

ROOT = Path(__file__).resolve().parents[2]
SECRET = "ksw_" + "S3cr3t" * 7  # what a token looks like
INTERNAL = {"detail": INTERNAL_MESSAGE, "code": "internal"}

# One of each class (and of each status a component's class refuses with): status, code.
CASES: list[tuple[GatewayError, int, str]] = [
    (BadRequest("after: not a number"), 400, "bad_request"),
    (Unauthorized("missing bearer token"), 401, "unauthorized"),
    (Forbidden("agent may not do this (needs operator)"), 403, "forbidden"),
    (NotFound("no dataset built yet"), 404, "not_found"),
    (BadMessageId("after"), 400, "bad_message_id"),
    (PrincipalError("bad name 'X'"), 400, "bad_request"),
    (PrincipalError("principal 'a' already exists", status=409), 409, "conflict"),
    (ChatError("message too large", 413), 413, "too_large"),
    (ChatError("slow down", 429, headers={"Retry-After": "3"}), 429, "rate_limited"),
    (ForgeError("PR #1 is already merged", 405), 405, "not_allowed"),
    (ForgeError("no repo a/b", 404), 404, "not_found"),
    (JobError("a ref that does not resolve", 422), 422, "unprocessable"),
    (RuleViolation("single_node", "8 devices do not fit one node"), 422, "rule_violation"),
    (BoardError("t-1 is claimed by bob", 409), 409, "conflict"),
    (CounterexampleError("3 counterexamples pending", 429), 429, "rate_limited"),
    (BoardError("unexpected board answer", 500), 500, "internal"),
    (ProxyError("upstream unreachable", 502), 502, "bad_gateway"),
    (ProxyError("upstream took too long", 504), 504, "timeout"),
    (BudgetRefused("over the daily budget", "agent", "daily"), 429, "budget_exhausted"),
    (BooksBusy("still booking a's last model call; try again"), 503, "unavailable"),
    (TooManyWaits("alice holds 8 open waits", headers={"Retry-After": "1"}), 429, "rate_limited"),
    (UiAuthError("log in", 401), 401, "unauthorized"),
    (RedisBusy(8, 2.0), 503, "redis_busy"),
    (GatewayError("no monitor is registered", 501), 501, "not_implemented"),
    (GatewayError("odd", 418), 418, "error"),
]


def all_classes(cls: type[GatewayError]) -> set[type[GatewayError]]:
    return {cls} | {c for sub in cls.__subclasses__() for c in all_classes(sub)}


class Strict(BaseModel):
    count: int = Field(ge=1)


def build_app() -> FastAPI:
    app = FastAPI()
    app.state.ctx = SimpleNamespace(error_pages={})  # all the handler reads of the context
    install_error_handler(app)
    for prefix in ("/api/t", "/api/v1/t", "/v1/t"):

        @app.get(f"{prefix}/case/{{index}}")
        async def case(index: int) -> None:
            raise CASES[index][0]

        @app.get(f"{prefix}/value")
        async def value() -> None:
            # A library refusing what the route let through, with a secret in its words.
            raise ValueError(f"cannot use token {SECRET}: not a number")

        @app.get(f"{prefix}/crash")
        async def crash() -> None:
            raise RuntimeError(f"the database password is {SECRET}")

    @app.post("/api/t/strict")
    async def strict(body: Strict) -> int:
        return body.count

    return app


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(build_app(), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.mark.parametrize(("index", "status", "code"), [(i, s, c) for i, (_, s, c) in enumerate(CASES)])
def test_every_error_class_answers_its_status_and_code(
    client: TestClient, index: int, status: int, code: str
) -> None:
    error = CASES[index][0]
    reply = client.get(f"/api/t/case/{index}")
    assert (reply.status_code, reply.json()) == (status, {"detail": error.message, "code": code})
    for name, value in error.headers.items():
        assert reply.headers[name] == value
    assert code in CODES and CODES[code][0] in (status, 0), "a code outside the vocabulary"
    gitea = client.get(f"/api/v1/t/case/{index}")  # another protocol's shape: exactly that protocol's
    assert (gitea.status_code, gitea.json()) == (status, {"message": error.message, "url": ""})


def test_the_cases_cover_every_class() -> None:
    assert all_classes(GatewayError) <= {type(error) for error, _, _ in CASES}


@pytest.mark.parametrize("prefix", ["/api/t", "/api/v1/t", "/v1/t"])
def test_a_value_error_is_a_logged_500_that_echoes_nothing(
    client: TestClient, caplog: pytest.LogCaptureFixture, prefix: str
) -> None:
    """Attack: a route whose library call fails with the caller's secret (or the server's) in its
    message. The caller gets a 500 and the generic text in the path's shape; the log gets the rest."""
    with caplog.at_level(logging.ERROR, logger="kswarm.errors"):
        reply = client.get(f"{prefix}/value")
    assert reply.status_code == 500
    assert SECRET not in reply.text and "not a number" not in reply.text
    assert SECRET not in str(reply.headers)
    assert INTERNAL_MESSAGE in reply.text
    if prefix == "/api/t":
        assert reply.json() == INTERNAL
    (record,) = [r for r in caplog.records if r.name == "kswarm.errors"]
    assert record.getMessage() == f"GET {prefix}/value failed"
    assert record.exc_info is not None and SECRET in str(record.exc_info[1])


def test_any_other_crash_is_the_same_500(client: TestClient) -> None:
    reply = client.get("/api/t/crash")
    assert (reply.status_code, reply.json()) == (500, INTERNAL)
    assert SECRET not in reply.text


def test_fastapis_own_answers_carry_a_code(client: TestClient) -> None:
    unknown = client.get("/api/t/nowhere")
    wrong_method = client.delete("/api/t/value")
    invalid = client.post("/api/t/strict", json={"count": 0})
    assert (unknown.status_code, unknown.json()) == (404, {"detail": "Not Found", "code": "not_found"})
    assert wrong_method.status_code == 405 and wrong_method.json()["code"] == "not_allowed"
    assert invalid.status_code == 422 and invalid.json()["code"] == VALIDATION_CODE
    (field,) = invalid.json()["detail"]  # FastAPI's list of field errors, unchanged
    assert field["loc"] == ["body", "count"] and field["type"] == "greater_than_equal"


def test_the_status_codes_are_in_the_vocabulary() -> None:
    for status, code in STATUS_CODES.items():
        assert CODES[code][0] == status, code
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", code) for code in CODES), "codes are snake_case"


def test_docs_list_the_vocabulary() -> None:
    """docs/gateway.md's table of codes is ``CODES``: the same codes, statuses, meanings and order."""
    text = (ROOT / "docs" / "gateway.md").read_text()
    rows = re.findall(r"^\| `([a-z_]+)` \| (\d{3}|any other) \| (.+) \|$", text, re.MULTILINE)
    documented = [
        (code, 0 if status == "any other" else int(status), meaning.replace("`", ""))
        for code, status, meaning in rows
    ]
    assert documented == [(code, status, meaning) for code, (status, meaning) in CODES.items()]


def test_no_route_raises_fastapis_http_exception() -> None:
    """Refusals are the shared errors (the git HTTP routes' too): FastAPI's ``HTTPException`` would
    bypass the vocabulary's codes and the shapes per prefix."""
    raising = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "gateway").rglob("*.py"))
        if re.search(r"\braise HTTPException\b|import HTTPException\b", path.read_text())
        and path.name != "error_shapes.py"
    ]
    assert raising == []
