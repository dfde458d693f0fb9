"""The client's side of the error vocabulary: the exception class chosen by the answer's ``code``, by
its status where the answer has no code the client knows, and classes named apart from the server's.
No gateway: answers built by hand (the real handler's answers are in tests/gateway/test_errors.py)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import gateway.client as client_package
from gateway.client.errors import (
    ERRORS_BY_CODE,
    ERRORS_BY_STATUS,
    BadInput,
    Conflict,
    GatewayCallError,
    GatewayFailed,
    Missing,
    Refused,
    TokenRefused,
    error_for,
    raise_for,
)
from gateway.errors import CODES, GatewayError
from gateway.redis_pool import RedisBusy


def failed(reply: httpx.Response) -> GatewayCallError:
    with pytest.raises(GatewayCallError) as raised:
        raise_for(reply)
    return raised.value


def answer(status: int, body: Any) -> httpx.Response:
    return httpx.Response(status, json=body)


@pytest.mark.parametrize("code", [c for c in CODES if c != "error"])
def test_every_code_of_the_gateway_has_its_class(code: str) -> None:
    """Each code of the vocabulary maps to a class, the one its status maps to: picking by code tells
    more (``exc.code``) but never changes a command's wording or exit code."""
    status = CODES[code][0]
    by_status = error_for(status, "why")
    by_code = error_for(status, "why", code)
    assert code in ERRORS_BY_CODE
    assert type(by_code) is type(by_status) and by_code.code == code


def test_the_code_picks_the_class() -> None:
    rule = failed(answer(422, {"detail": "refused by rule single_node: 8 devices", "code": "rule_violation"}))
    assert type(rule) is BadInput and rule.code == "rule_violation" and rule.status == 422
    assert rule.line() == "bad input: refused by rule single_node: 8 devices (HTTP 422)"
    # The code decides where it and the status disagree (a proxy rewriting statuses, say).
    assert type(failed(answer(400, {"detail": "gone", "code": "not_found"}))) is Missing
    assert type(failed(answer(500, {"detail": "held", "code": "conflict"}))) is Conflict
    busy = failed(answer(503, {"detail": "the gateway is busy; retry", "code": "redis_busy"}))
    assert type(busy) is GatewayFailed and busy.code == "redis_busy"
    budget = failed(answer(429, {"detail": "over budget", "code": "budget_exhausted"}))
    assert type(budget) is Refused and budget.exit_code == 1


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (404, {"detail": "no such thing", "code": "from_a_newer_gateway"}, Missing),
        (404, {"message": "no repo a/b", "url": ""}, Missing),  # Gitea's shape: no code
        (401, {"type": "error", "error": {"type": "authentication_error", "message": "no"}}, TokenRefused),
        (409, {"detail": "taken"}, Conflict),  # an older gateway
        (413, {"detail": "too large"}, BadInput),
        (405, {"detail": "Method Not Allowed", "code": 405}, Refused),  # a code that is not a name
        (429, None, Refused),
        (502, None, GatewayFailed),
    ],
)
def test_without_a_known_code_the_status_picks(status: int, body: Any, kind: type[GatewayCallError]) -> None:
    reply = answer(status, body) if body is not None else httpx.Response(status, text="<html>proxy</html>")
    error = failed(reply)
    assert type(error) is kind and error.status == status
    assert error.code == (body.get("code") if body and isinstance(body.get("code"), str) else "")


def test_the_reason_is_read_from_every_shape() -> None:
    assert failed(answer(404, {"detail": "no channel 'x'", "code": "not_found"})).detail == "no channel 'x'"
    assert failed(answer(404, {"message": "no repo a/b", "url": ""})).detail == "no repo a/b"
    fields = [{"loc": ["body", "count"], "msg": "Input should be greater than or equal to 1", "type": "x"}]
    invalid = failed(answer(422, {"detail": fields, "code": "invalid_request"}))
    assert invalid.detail == "count: Input should be greater than or equal to 1"


def test_a_success_raises_nothing() -> None:
    raise_for(httpx.Response(200, json={"ok": True}))
    raise_for(httpx.Response(204))


def all_classes(cls: type[Exception]) -> set[type[Exception]]:
    subclasses: list[type[Exception]] = cls.__subclasses__()
    return {cls} | {c for sub in subclasses for c in all_classes(sub)}


def test_client_and_server_classes_share_no_name() -> None:
    """``except NotFound`` must say whose: the server's classes (``gateway.errors``, and those beside
    their components) and the client's (all it exports) are named apart."""
    server = {cls.__name__ for cls in all_classes(GatewayError)}
    client = {cls.__name__ for cls in all_classes(GatewayCallError)}
    exported = {name for name in client_package.__all__ if isinstance(getattr(client_package, name), type)}
    assert {"GatewayError", "NotFound", RedisBusy.__name__} <= server
    assert {"GatewayCallError", "Missing"} <= client <= exported
    assert not server & exported
    assert {kind.__name__ for kind in ERRORS_BY_STATUS.values()} <= client
