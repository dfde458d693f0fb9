"""A task's input domain: every input its kernel must handle, not only the cases it was shown.

``task.py`` declares it as ``DOMAIN`` (docs/tasks.md, "Input domain"):

    DOMAIN = {
        "dims": {"rows": [1, 65536], "cols": [1, 65536]},   # inclusive, per dimension of DIMS
        "params": {"k": [1, 8]},                            # other case keys, same form (optional)
        "constraints": ["k <= E"],                          # between keys (optional)
        "values": "normal",                                 # how the inputs' values are drawn
        "special_values": ["zeros", "large"],               # values the reference defines
    }

A range may also be ``{"range": [lo, hi], "multiple_of": m}``. The domain's dtypes are the task's
``DTYPES`` and its layouts the task's ``INPUT_LAYOUTS``; the task's ``CPU_SHAPES`` and ``SHAPES`` are
named points in it (``cpu-0``, ``device-0``, ...), each checked to lie inside at load. One validator,
``InputDomain.check``, says whether a given input is inside and, if not, why: the red-team's
counterexamples and the gate's fresh inputs are judged by it (issue 27).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

ShapeCase = dict[str, int]

VALUE_DISTRIBUTIONS = ("normal", "uniform", "positive", "logits", "indices")
# Values a reference may define and a kernel must then get right: all-zero inputs (and constant rows),
# NaN and +-Inf, subnormal numbers, ties (equal maxima), magnitudes near the dtype's range.
SPECIAL_VALUES = ("zeros", "nan", "inf", "denormals", "ties", "large")
COMPARISONS: Mapping[str, Callable[[int, int], bool]] = MappingProxyType(
    {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt, "==": operator.eq}
)
CONSTRAINT_RE = re.compile(r"^\s*([A-Za-z_]\w*)\s*(<=|<|>=|>|==)\s*([A-Za-z_]\w*|\d+)\s*$")
MAX_EXTENT = 1 << 40


class DomainError(ValueError):
    """A ``DOMAIN`` that does not parse, or a named point (a task's shape) outside it."""


@dataclass(frozen=True)
class Extent:
    """One case key's allowed values: ``lo`` to ``hi`` inclusive, multiples of ``multiple_of``."""

    lo: int
    hi: int
    multiple_of: int = 1

    def why_not(self, key: str, value: int) -> str | None:
        if not self.lo <= value <= self.hi:
            return f"{key}={value} is outside [{self.lo}, {self.hi}]"
        if value % self.multiple_of:
            return f"{key}={value} is not a multiple of {self.multiple_of}"
        return None

    def describe(self) -> str:
        step = f" (multiples of {self.multiple_of})" if self.multiple_of > 1 else ""
        return f"[{self.lo}, {self.hi}]{step}"


@dataclass(frozen=True)
class Constraint:
    left: str
    op: str
    right: str  # a key or an integer

    def why_not(self, case: Mapping[str, int]) -> str | None:
        if self.left not in case or not (self.right.isdigit() or self.right in case):
            return None  # a parameter left out takes the task's default, which the task keeps inside
        right = int(self.right) if self.right.isdigit() else case[self.right]
        if COMPARISONS[self.op](case[self.left], right):
            return None
        return f"{self.left}={case[self.left]} breaks {self.left} {self.op} {self.right}"


@dataclass(frozen=True)
class InputDomain:
    extents: Mapping[str, Extent]
    dims: tuple[str, ...]
    dtypes: tuple[str, ...]
    layouts: Mapping[int, tuple[str, ...]]
    values: str = "normal"
    special_values: tuple[str, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    points: Mapping[str, ShapeCase] = field(default_factory=dict)

    def check(
        self,
        case: Mapping[str, int],
        dtype: str | None = None,
        layouts: Mapping[int, str] | None = None,
        special: Sequence[str] = (),
    ) -> list[str]:
        """Why an input (a case, and optionally its dtype, per-input layouts and special values) is
        outside the domain; empty when it is inside."""
        reasons = [
            f"{k} is not a key of this task (keys: {', '.join(self.extents)})"
            for k in case
            if k not in self.extents
        ]
        reasons += [f"{k} is missing" for k in self.dims if k not in case]  # a param may be left out
        if reasons:
            return reasons
        for key, extent in self.extents.items():
            if key not in case:
                continue
            value = case[key]
            if isinstance(value, bool) or not isinstance(value, int):
                reasons.append(f"{key}={value!r} is not an integer")
                continue
            why = extent.why_not(key, value)
            if why:
                reasons.append(why)
        if not reasons:
            reasons += [why for c in self.constraints if (why := c.why_not(case))]
        if dtype is not None and dtype not in self.dtypes:
            reasons.append(f"dtype {dtype} is not one of {', '.join(self.dtypes)}")
        for index, layout in (layouts or {}).items():
            allowed = self.layouts.get(index, ("dense",))
            if layout not in allowed:
                reasons.append(f"input {index}'s layout {layout} is not one of {', '.join(allowed)}")
        defined = ", ".join(self.special_values) or "none"
        reasons += [
            f"special value {s} is not one the reference defines here ({defined})"
            for s in special
            if s not in self.special_values
        ]
        return reasons

    def contains(self, case: Mapping[str, int], dtype: str | None = None) -> bool:
        return not self.check(case, dtype)

    def describe(self) -> dict[str, object]:
        """The domain as plain data (job records, ``kswarm`` output, the red-team's prompt)."""
        return {
            "dims": {k: e.describe() for k, e in self.extents.items() if k in self.dims},
            "params": {k: e.describe() for k, e in self.extents.items() if k not in self.dims},
            "constraints": [f"{c.left} {c.op} {c.right}" for c in self.constraints],
            "dtypes": list(self.dtypes),
            "layouts": {str(i): list(v) for i, v in self.layouts.items()},
            "values": self.values,
            "special_values": list(self.special_values),
            "points": {name: dict(case) for name, case in self.points.items()},
        }


def _extent(key: str, raw: object) -> Extent:
    multiple_of = 1
    if isinstance(raw, Mapping):
        unknown = set(raw) - {"range", "multiple_of"}
        if unknown:
            raise DomainError(f"DOMAIN range of {key}: unknown key(s) {sorted(unknown)}")
        multiple_of = raw.get("multiple_of", 1)
        raw = raw.get("range")
    if (
        not isinstance(raw, Sequence)
        or isinstance(raw, str)
        or len(raw) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in raw)
    ):
        raise DomainError(f"DOMAIN range of {key}: [lo, hi] with integers, got {raw!r}")
    lo, hi = int(raw[0]), int(raw[1])
    if not isinstance(multiple_of, int) or multiple_of < 1:
        raise DomainError(f"DOMAIN range of {key}: multiple_of must be a positive integer")
    if not 0 <= lo <= hi <= MAX_EXTENT:
        raise DomainError(f"DOMAIN range of {key}: needs 0 <= lo <= hi <= 2**40, got [{lo}, {hi}]")
    return Extent(lo, hi, multiple_of)


def _constraint(raw: object, keys: Sequence[str]) -> Constraint:
    found = CONSTRAINT_RE.match(raw) if isinstance(raw, str) else None
    if found is None:
        raise DomainError(f"DOMAIN constraint {raw!r}: 'key <op> key-or-integer' with <, <=, >, >=, ==")
    left, op, right = found.groups()
    for name in (left, right):
        if not name.isdigit() and name not in keys:
            raise DomainError(f"DOMAIN constraint {raw!r}: {name} is not a key of the domain")
    return Constraint(left, op, right)


def parse_domain(
    raw: object,
    *,
    dims: Sequence[str],
    dtypes: Sequence[str],
    layouts: Mapping[int, tuple[str, ...]],
    cpu_shapes: Sequence[ShapeCase],
    shapes: Sequence[ShapeCase],
) -> InputDomain:
    """``DOMAIN`` checked: a range for every dimension and every other case key, known value and special
    value names, and every CPU and device shape inside it (they are its named points)."""
    if not isinstance(raw, Mapping):
        raise DomainError("DOMAIN must be a mapping with dims: (docs/tasks.md, 'Input domain')")
    unknown = set(raw) - {"dims", "params", "constraints", "values", "special_values"}
    if unknown:
        raise DomainError(f"DOMAIN: unknown key(s) {sorted(unknown)}")
    dim_ranges, param_ranges = raw.get("dims"), raw.get("params", {})
    if not isinstance(dim_ranges, Mapping) or not isinstance(param_ranges, Mapping):
        raise DomainError("DOMAIN dims and params map each case key to its range")
    if set(dim_ranges) != set(dims):
        raise DomainError(
            f"DOMAIN dims must give a range for exactly DIMS {list(dims)}, got {sorted(dim_ranges)}"
        )
    extents = {str(k): _extent(str(k), v) for k, v in {**dim_ranges, **param_ranges}.items()}
    constraints = tuple(_constraint(c, list(extents)) for c in raw.get("constraints", []) or [])
    values = raw.get("values", "normal")
    if values not in VALUE_DISTRIBUTIONS:
        raise DomainError(f"DOMAIN values {values!r}: one of {', '.join(VALUE_DISTRIBUTIONS)}")
    special = tuple(raw.get("special_values", []) or [])
    bad = [s for s in special if s not in SPECIAL_VALUES]
    if bad:
        raise DomainError(f"DOMAIN special_values {bad}: each one of {', '.join(SPECIAL_VALUES)}")
    points = {f"cpu-{i}": dict(c) for i, c in enumerate(cpu_shapes)}
    points |= {f"device-{i}": dict(c) for i, c in enumerate(shapes)}
    domain = InputDomain(
        extents=MappingProxyType(extents),
        dims=tuple(dims),
        dtypes=tuple(dtypes),
        layouts=MappingProxyType(dict(layouts)),
        values=str(values),
        special_values=special,
        constraints=constraints,
        points=MappingProxyType(points),
    )
    for name, case in points.items():
        reasons = domain.check(case)
        if reasons:
            raise DomainError(f"the task's shape {name} {case} is outside its DOMAIN: {'; '.join(reasons)}")
    return domain
