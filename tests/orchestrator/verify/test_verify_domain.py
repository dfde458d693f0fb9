"""A task's input domain (orchestrator/verify/domain.py): every catalogue task declares one with its
shapes as named points in it, one validator says whether an input is inside and why not, and a
``DOMAIN`` that does not hold (a shape outside it, a bad range or name) is refused at load."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.verify.domain import SPECIAL_VALUES, DomainError, parse_domain
from orchestrator.verify.tasks import TaskError, load_task

CATALOGUE = Path(__file__).resolve().parents[3] / "gateway" / "tasks" / "catalogue" / "tasks"
TASKS = sorted(p.name for p in CATALOGUE.iterdir() if (p / "task.py").is_file())


@pytest.mark.parametrize("name", TASKS)
def test_every_catalogue_task_declares_its_domain_with_its_shapes_inside(name: str) -> None:
    task = load_task(CATALOGUE / name)
    assert task.domain is not None, f"{name} declares no DOMAIN"
    assert set(task.domain.dims) == set(task.dims)
    assert task.domain.dtypes == task.dtypes
    named = task.domain.points
    assert len(named) == len(task.cpu_shapes) + len(task.shapes)
    assert all(task.domain.contains(case) for case in named.values())
    assert set(task.domain.special_values) <= set(SPECIAL_VALUES)


def rows_domain(**extra: object) -> object:
    raw = {"dims": {"rows": [1, 1024], "cols": {"range": [2, 4096], "multiple_of": 2}}, **extra}
    return parse_domain(
        raw,
        dims=("rows", "cols"),
        dtypes=("float32",),
        layouts={0: ("dense", "padded")},
        cpu_shapes=[{"rows": 7, "cols": 34}],
        shapes=[{"rows": 1024, "cols": 4096}],
    )


def test_the_validator_says_why_an_input_is_outside() -> None:
    domain = rows_domain(special_values=["zeros"], params={"k": [1, 8]}, constraints=["k <= rows"])
    assert domain.check({"rows": 3, "cols": 8}) == []
    assert domain.check({"rows": 0, "cols": 8}) == ["rows=0 is outside [1, 1024]"]
    assert domain.check({"rows": 3, "cols": 9}) == ["cols=9 is not a multiple of 2"]
    assert domain.check({"rows": 3}) == ["cols is missing"]
    assert domain.check({"rows": 3, "cols": 8, "depth": 2})[0].startswith("depth is not a key")
    assert domain.check({"rows": 3, "cols": 8, "k": 5}) == ["k=5 breaks k <= rows"]
    assert domain.check({"rows": 3, "cols": 8}, "float16") == ["dtype float16 is not one of float32"]
    assert domain.check({"rows": 3, "cols": 8}, layouts={0: "broadcast"}) == [
        "input 0's layout broadcast is not one of dense, padded"
    ]
    assert domain.check({"rows": 3, "cols": 8}, special=["nan"]) == [
        "special value nan is not one the reference defines here (zeros)"
    ]
    assert domain.check({"rows": True, "cols": 8}) == ["rows=True is not an integer"]


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(-10, 2000), cols=st.integers(-10, 5000))
def test_inside_exactly_when_every_range_holds(rows: int, cols: int) -> None:
    domain = rows_domain()
    inside = 1 <= rows <= 1024 and 2 <= cols <= 4096 and cols % 2 == 0
    assert domain.contains({"rows": rows, "cols": cols}) is inside


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"dims": {"rows": [1, 1024]}}, "exactly DIMS"),
        (
            {"dims": {"rows": [1, 512], "cols": [2, 4096]}},
            "shape device-0 {'rows': 1024, 'cols': 4096} is outside",
        ),
        ({"dims": {"rows": [5, 1], "cols": [2, 4096]}}, "needs 0 <= lo <= hi"),
        ({"dims": {"rows": "big", "cols": [2, 4096]}}, "[lo, hi] with integers"),
        ({"dims": {"rows": [1, 1024], "cols": [2, 4096]}, "special_values": ["gremlins"]}, "special_values"),
        ({"dims": {"rows": [1, 1024], "cols": [2, 4096]}, "values": "spicy"}, "values 'spicy'"),
        ({"dims": {"rows": [1, 1024], "cols": [2, 4096]}, "constraints": ["rows ~ cols"]}, "constraint"),
        ({"dims": {"rows": [1, 1024], "cols": [2, 4096]}, "constraints": ["n <= rows"]}, "n is not a key"),
        ({"dims": {"rows": [1, 1024], "cols": [2, 4096]}, "shapes": []}, "unknown key"),
    ],
)
def test_a_domain_that_does_not_hold_is_refused_with_the_reason(raw: object, says: str) -> None:
    with pytest.raises(DomainError, match=None) as caught:
        parse_domain(
            raw,
            dims=("rows", "cols"),
            dtypes=("float32",),
            layouts={},
            cpu_shapes=[{"rows": 7, "cols": 34}],
            shapes=[{"rows": 1024, "cols": 4096}],
        )
    assert says in str(caught.value)


def test_a_task_whose_shape_leaves_its_domain_does_not_load(tmp_path: Path) -> None:
    text = (CATALOGUE / "add" / "task.py").read_text().replace('"n": [1, 67108864]', '"n": [1, 4096]')
    assert text != (CATALOGUE / "add" / "task.py").read_text()
    (tmp_path / "add").mkdir()
    (tmp_path / "add" / "task.py").write_text(text)
    with pytest.raises(TaskError, match=r"shape device-0 \{'n': 98765\} is outside its DOMAIN"):
        load_task(tmp_path / "add")
