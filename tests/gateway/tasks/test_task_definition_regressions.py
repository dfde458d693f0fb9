"""How the definition route reads one ``tasks/<task>/regressions/<id>.json`` (issue 27): a good case is
listed with its blob; a bad one is listed with why (never a 500), and no worker stores it; the worker's
cache key is task.py's blob alone without usable cases and changes with each new one. The route itself,
on a real dataset main, is tested in tests/gateway/counterexamples/test_heal.py."""

from __future__ import annotations

from gateway.tasks.definitions import blob_sha, regression_file
from gateway.tasks.models import RegressionFile, definition_key
from kswarm_contracts.counterexample import CounterexampleInput, RegressionCase

CASE = "cx0123456789ab"


def case_json(case_id: str = CASE, task: str = "add") -> str:
    return RegressionCase(
        id=case_id, task=task, input=CounterexampleInput(case={"n": 1000}, dtype="float32"),
        finder="mallory", kernel="kernels/add/k.py", sha="a" * 40, job="j0123456789abc",
    ).model_dump_json()  # fmt: skip


def read(name: str, text: str, task: str = "add") -> RegressionFile | None:
    data = text.encode()
    return regression_file(task, f"tasks/{task}/regressions/{name}", blob_sha(data), len(data), text)


def test_a_good_case_is_listed_and_bad_ones_say_why() -> None:
    good = read(f"{CASE}.json", case_json())
    assert good is not None and good.error is None and good.id == CASE
    assert "not a regression case" in (read(f"{CASE}.json", "{nope").error or "")
    assert "not a counterexample id" in (read("evil.json", case_json()).error or "")
    assert "are not the file's" in (read(f"{CASE}.json", case_json(task="relu")).error or "")
    assert "are not the file's" in (read(f"{CASE}.json", case_json("cx" + "9" * 12)).error or "")
    assert read("sub/x.json", case_json()) is None, "only files directly in regressions/ are cases"


def test_the_cache_key_follows_the_usable_cases() -> None:
    task = "f" * 40
    one = RegressionFile(id=CASE, path="p", blob_sha="1" * 40, size=1)
    bad = RegressionFile(id="cx" + "2" * 12, path="q", blob_sha="2" * 40, size=1, error="bad")
    assert definition_key(task, []) == task == definition_key(task, [bad])
    two = RegressionFile(id="cx" + "3" * 12, path="r", blob_sha="3" * 40, size=1)
    keys = {definition_key(task, [one]), definition_key(task, [one, two]), task}
    assert len(keys) == 3 and definition_key(task, [two, one]) == definition_key(task, [one, two])
