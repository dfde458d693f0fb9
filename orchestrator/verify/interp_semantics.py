"""What Triton leaves unspecified, explored the way the weakest device may behave (cpu pool).

The interpreter implements one friendly semantics: hints are stored and never read, scans and
reductions with a user combine fold left to right, ``tie_break_left=False`` still returns the first
tied index. A device may do otherwise, so while the instruments are installed:

- **hints are assertions**: ``tl.multiple_of``, ``tl.max_contiguous``, ``tl.max_constancy`` (on
  integers and pointers) and ``tl.assume`` are checked against the values they annotate; an untrue
  one is recorded as "false_hint" (a compiler vectorises, aligns and folds on them);
- **association order**: ``tl.reduce`` / ``tl.associative_scan`` with a user combine run in a
  device-like order (each "thread" folds a chunk of random power-of-two length, then a tree across
  chunks); the left fold is computed too, and a difference beyond rounding is recorded as
  "non_associative" naming the combine. The device-like result is the one returned;
- **ties**: argmax/argmin with ``tie_break_left=False`` return a random tied index (a "tie" note is
  sent when it is not the first: the parent names ``tie_dependent`` only if the call is also wrong);
- **inputs are read-only** (principle 5): a store or atomic lane into the storage of one of the
  trial's inputs is "input_write", even if the value is restored before the call returns.
"""

from __future__ import annotations

import dis
import random
import types
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np
import torch

_STORAGE = torch._C.TensorBase.untyped_storage
_HINTS = {
    "tt.divisibility": "multiple_of",
    "tt.contiguity": "max_contiguous",
    "tt.constancy": "max_constancy",
}
# A float combine whose orders differ by more than this many units of rounding per element (relative
# to the magnitudes involved) is not associative; honest sums and online-softmax merges stay far below.
_ROUNDING_UNITS = 8.0
_MAX_REL = 0.05
# A GPU thread folds a run of its own lanes (sizePerThread) before the tree across threads: the device
# order uses a random run length from these; the second order folds runs of _SECOND_RUN (the plain
# left fold for blocks up to that size), so the two bracketings always differ and both stay cheap.
_DEVICE_RUNS = (1, 2, 4, 8, 16)
_SECOND_RUN = 32

Arrays = list[np.ndarray]
Combine = Callable[[Arrays, Arrays], Arrays]


class _Owner(Protocol):
    """What of InterpreterInstruments this module reads (no import: interp.py imports us)."""

    monitor: Any
    launch: Any
    launches: int
    seed: int
    inputs: list[torch.Tensor]


class Semantics:
    """Installed with the interpreter's instruments; every finding goes to ``owner.monitor``."""

    def __init__(self, owner: _Owner) -> None:
        import triton.language as tl
        from triton.runtime import interpreter

        self.owner, self.I, self.tl = owner, interpreter, tl
        self.builder = interpreter.interpreter_builder
        self.fast_ties = {
            tl.standard._argmax_combine_tie_break_fast: np.nanmax,
            tl.standard._argmin_combine_tie_break_fast: np.nanmin,
        }
        sem = self

        def set_attr(handle: Any, key: str, value: Any) -> None:
            sem.original["set_attr"](handle, key, value)
            if key in _HINTS:
                sem.check_hint(handle, _HINTS[key], value)

        def apply_impl(ops: Any, input: Any) -> Any:
            result = sem.original["apply_impl"](ops, input)
            return sem.ties(ops, input, result) if ops.combine_fn in sem.fast_ties else result

        def generic_reduce(ops: Any, input: Any) -> Any:
            return sem.reduce(ops, input)

        def generic_scan(ops: Any, input: Any) -> Any:
            return sem.scan(ops, input)

        self.patches: list[tuple[type, str, Callable[..., Any]]] = [
            (interpreter.TensorHandle, "set_attr", set_attr),
            (interpreter.ReduceOps, "apply_impl", apply_impl),
            (interpreter.ReduceOps, "generic_reduce", generic_reduce),
            (interpreter.ScanOps, "generic_scan", generic_scan),
        ]
        self.original = {name: vars(cls)[name] for cls, name, _ in self.patches}
        self.scalar_only: dict[object, bool] = {}
        self.rng_key: tuple[int, int] | None = None
        self.rng = random.Random(0)

    def install(self) -> None:
        for cls, name, wrapper in self.patches:
            setattr(cls, name, wrapper)
        self.builder.create_assume = self._assume

    def uninstall(self) -> None:
        for cls, name, _ in self.patches:
            setattr(cls, name, self.original[name])
        self.builder.__dict__.pop("create_assume", None)

    # --- shared ------------------------------------------------------------------------------------
    def _name(self) -> str:
        launch = self.owner.launch
        return launch.name if launch is not None else "kernel"

    def _random(self) -> random.Random:
        """Per launch and independent of the program-order draws (same seed, same choices)."""
        key = (self.owner.seed, self.owner.launches)
        if key != self.rng_key:
            self.rng_key, self.rng = key, random.Random(f"{key[0]}:{key[1]}:semantics")
        return self.rng

    # --- inputs are read-only (principle 5) --------------------------------------------------------
    def check_store(self, addrs: np.ndarray, what: str) -> None:
        """addrs: the lanes a store or atomic performs (out-of-bounds lanes already dropped)."""
        if not addrs.size or not self.owner.inputs:
            return
        signed = addrs.astype(np.int64).ravel()
        for i, t in enumerate(self.owner.inputs):
            storage = _STORAGE(t)
            start, size = int(storage.data_ptr()), int(storage.nbytes())
            inside = int(((signed >= start) & (signed < start + size)).sum())
            if inside:
                self.owner.monitor.record(
                    "input_write",
                    f"{self._name()}: {what} into input {i} while the call runs (inputs are read-only)",
                )

    # --- hints are assertions ----------------------------------------------------------------------
    def _assume(self, condition: Any) -> None:
        if not bool(np.all(np.asarray(condition.data))):
            self.owner.monitor.record("false_hint", f"{self._name()}: tl.assume(...) is false on the data")

    def check_hint(self, handle: Any, hint: str, values: Sequence[Any]) -> None:
        if self.owner.launch is None:
            return
        data = np.asarray(handle.data)
        dtype = handle.dtype
        if not (dtype.is_ptr() or dtype.is_int()) or data.dtype.kind not in "iub":
            return  # a hint on floats means nothing to the compiler's axis analysis
        step = dtype.element_ty.primitive_bitwidth // 8 if dtype.is_ptr() else 1
        data = data.astype(np.int64) if data.dtype.kind != "u" else data.astype(np.uint64)
        claims = [int(getattr(v, "value", v)) for v in values]
        bad = _hint_violation(data, hint, claims, step)
        if bad:
            self.owner.monitor.record(
                "false_hint", f"{self._name()}: tl.{hint}(..., {claims}) is untrue on the data ({bad})"
            )

    # --- ties --------------------------------------------------------------------------------------
    def ties(self, ops: Any, input: Any, result: Any) -> Any:
        """argmax/argmin, tie_break_left=False: any tied index, as a device may return."""
        values, index = result
        data, dtype = np.asarray(input[0].handle.data), input[0].dtype
        if dtype.name == "bf16" and data.dtype == np.uint16:
            data = _as_float(data, dtype)  # raw bits do not order like the values
        raw = dtype.is_floating() and data.dtype.kind != "f"  # other raw encodings (fp8)
        if ops.axis is None or raw or data.dtype.kind not in "fiu":
            return result  # the first index stays
        axis = ops.axis % data.ndim
        with _quiet():
            best = self.fast_ties[ops.combine_fn](data, axis=axis, keepdims=True)
        tied = data == best
        first = np.argmax(tied, axis=axis)
        gen = np.random.default_rng(self._random().getrandbits(64))
        keys = np.where(tied, gen.random(data.shape), -1.0)
        pick = np.argmax(keys, axis=axis)
        moved = int((pick != first).sum())  # differs only where there was a tie
        if not moved:
            return result
        self.owner.monitor.record(
            "tie",
            f"{self._name()}: {moved} tie(s) of argmax/argmin (tie_break_left=False) went to a later index",
        )
        shape = np.asarray(index.handle.data).shape
        index.handle.data = pick.astype(np.asarray(index.handle.data).dtype).reshape(shape)
        return values, index

    # --- association order -------------------------------------------------------------------------
    def reduce(self, ops: Any, input: Sequence[Any]) -> list[Any]:
        axis = ops.axis
        datas = [np.asarray(t.handle.data) for t in input]
        if axis is None:
            datas, axis = [d.reshape(-1) for d in datas], 0
        axis %= datas[0].ndim
        lanes = [np.moveaxis(d, axis, -1) for d in datas]
        dtypes = [t.dtype for t in input]
        combine = self._combine(ops, dtypes)
        chunk, second = self._runs(lanes[0].shape[-1])
        device = _chunked_reduce(combine, lanes, chunk)
        if second != chunk:
            self._compare(ops, device, _chunked_reduce(combine, lanes, second), lanes, dtypes, "tl.reduce")
        out = []
        for d, dtype in zip(device, dtypes, strict=True):
            if ops.keep_dims and ops.axis is not None:
                d = np.expand_dims(d, axis)
            elif ops.keep_dims:
                d = d.reshape((1,) * np.asarray(input[0].handle.data).ndim)
            elif ops.axis is None:
                d = d.item()
            out.append(ops.to_tensor(d, dtype))
        return out

    def scan(self, ops: Any, input: Sequence[Any]) -> list[Any]:
        axis = ops.axis % np.asarray(input[0].handle.data).ndim
        lanes = [np.moveaxis(np.asarray(t.handle.data), axis, -1) for t in input]
        dtypes = [t.dtype for t in input]
        combine = self._combine(ops, dtypes)
        chunk, second = self._runs(lanes[0].shape[-1])
        device = _chunked_scan(combine, lanes, chunk)
        if second != chunk:
            second_order = _chunked_scan(combine, lanes, second)
            self._compare(ops, device, second_order, lanes, dtypes, "tl.associative_scan")
        return [ops.to_tensor(np.moveaxis(d, -1, axis), t.dtype) for d, t in zip(device, input, strict=True)]

    def _runs(self, n: int) -> tuple[int, int]:
        """(device run, second run): lengths dividing n; the device's is below n, so a tree follows."""
        sizes = [c for c in _DEVICE_RUNS if c < n and n % c == 0]
        chunk = self._random().choice(sizes) if sizes else n
        second = min(n, _SECOND_RUN) if n % min(n, _SECOND_RUN) == 0 else n
        return chunk, (chunk if n <= 2 else second)  # two lanes have one bracketing only

    def _compare(
        self, ops: Any, device: Arrays, fold: Arrays, lanes: Arrays, dtypes: list[Any], what: str
    ) -> None:
        n = lanes[0].shape[-1]
        for j, (a, b) in enumerate(zip(device, fold, strict=True)):
            gap = _difference(a, b, lanes[j], dtypes[j], n)
            if gap:
                fn = getattr(ops.combine_fn, "__name__", "combine")
                self.owner.monitor.record(
                    "non_associative",
                    f"{self._name()}: the combine {fn} of {what} is not associative: another association "
                    f"order (as on a device) changes result {j} ({gap})",
                )
                return

    def _combine(self, ops: Any, dtypes: list[Any]) -> Combine:
        """The user's combine applied to whole arrays of lanes (one call per level, not per lane)."""
        fn = ops.combine_fn.fn
        vectorised = not self._has_control_flow(fn)

        def apply(left: Arrays, right: Arrays) -> Arrays:
            shape = left[0].shape
            if not self.scalar_only.get(fn, not vectorised):
                try:
                    return _call(ops, fn, dtypes, left, right, shape)
                except Exception:  # a combine written for scalars only: lane by lane from now on
                    self.scalar_only[fn] = True
            outs = [np.empty(shape, dtype=a.dtype) for a in left]
            for idx in np.ndindex(*shape):
                one = _call(ops, fn, dtypes, [a[idx] for a in left], [b[idx] for b in right], ())
                for o, v in zip(outs, one, strict=True):
                    o[idx] = v.reshape(-1)[0]
            return outs

        return apply

    def _has_control_flow(self, fn: Any, depth: int = 0) -> bool:
        """Branches (if, and/or, loops) on a tensor only work lane by lane in the interpreter."""
        known = self.scalar_only.get(fn)
        if known is not None:
            return known
        code = getattr(fn, "__code__", None)
        if not isinstance(code, types.CodeType) or depth > 4:
            return True
        flow = any("JUMP" in i.opname or i.opname == "FOR_ITER" for i in dis.get_instructions(code))
        for name in code.co_names:
            callee = getattr(fn, "__globals__", {}).get(name)
            inner = getattr(callee, "fn", None)
            if not flow and isinstance(inner, types.FunctionType):
                flow = self._has_control_flow(inner, depth + 1)
        self.scalar_only[fn] = flow
        return flow


# --- pure helpers ----------------------------------------------------------------------------------
@contextmanager
def _quiet() -> Iterator[None]:
    """NaN and overflow are values here, not errors (all-NaN rows, inf - inf in a combine)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _call(
    ops: Any, fn: Any, dtypes: list[Any], left: Arrays, right: Arrays, shape: tuple[int, ...]
) -> Arrays:
    """fn on lanes of any shape: Triton blocks need power-of-two shapes, so lanes go in flat, padded
    with copies of real lanes (their results are dropped)."""
    size = int(np.prod(shape, dtype=np.int64))
    width = 1 << max(size - 1, 0).bit_length() if shape else 0

    def block(a: np.ndarray, dtype: Any) -> Any:
        a = np.asarray(a)
        return ops.to_tensor(np.resize(np.broadcast_to(a, shape), width) if shape else a, dtype)

    args = [block(a, d) for a, d in zip([*left, *right], [*dtypes, *dtypes], strict=True)]
    ret = fn(*args)
    ret = ret if isinstance(ret, tuple) else (ret,)
    out = []
    for r, a in zip(ret, left, strict=True):
        value = np.asarray(r.handle.data if hasattr(r, "handle") else getattr(r, "value", r))
        value = value.astype(np.asarray(a).dtype)
        if not shape:
            out.append(value.reshape(-1)[0].copy())
        else:
            out.append(np.broadcast_to(value, (width,))[:size].reshape(shape).copy())
    return out


def _chunked_reduce(combine: Combine, lanes: Arrays, chunk: int) -> Arrays:
    """Fold runs of ``chunk`` lanes in order, then combine the run results pairwise (a tree)."""
    n = lanes[0].shape[-1]
    runs = [a.reshape(*a.shape[:-1], n // chunk, chunk) for a in lanes]
    acc = [r[..., 0] for r in runs]
    for k in range(1, chunk):
        acc = combine(acc, [r[..., k] for r in runs])
    while acc[0].shape[-1] > 1:
        m = acc[0].shape[-1]
        pairs = combine([a[..., 0 : m - 1 : 2] for a in acc], [a[..., 1:m:2] for a in acc])
        if m % 2:  # an odd run result waits for the next level
            pairs = [np.concatenate([p, a[..., m - 1 :]], axis=-1) for p, a in zip(pairs, acc, strict=True)]
        acc = pairs
    return [a[..., 0] for a in acc]


def _chunked_scan(combine: Combine, lanes: Arrays, chunk: int) -> Arrays:
    """Scan runs of ``chunk`` lanes in order, scan the run totals as a tree (Hillis-Steele), then
    combine each run with the prefix of the runs before it: Triton's lowering on a GPU."""
    n = lanes[0].shape[-1]
    runs = [a.reshape(*a.shape[:-1], n // chunk, chunk).copy() for a in lanes]
    for k in range(1, chunk):
        new = combine([r[..., k - 1] for r in runs], [r[..., k] for r in runs])
        for r, v in zip(runs, new, strict=True):
            r[..., k] = v
    totals = [r[..., -1].copy() for r in runs]
    m, d = n // chunk, 1
    while d < m:
        new = combine([t[..., : m - d] for t in totals], [t[..., d:] for t in totals])
        for t, v in zip(totals, new, strict=True):
            t[..., d:] = v
        d *= 2
    if m > 1:
        shape = runs[0][..., 1:, :].shape
        prefix = [np.broadcast_to(t[..., :-1, None], shape) for t in totals]
        new = combine(prefix, [r[..., 1:, :] for r in runs])
        for r, v in zip(runs, new, strict=True):
            r[..., 1:, :] = v
    return [r.reshape(*r.shape[:-2], n) for r in runs]


def _as_float(a: np.ndarray, dtype: Any) -> np.ndarray:
    if dtype.name == "bf16" and a.dtype == np.uint16:  # the interpreter keeps bf16 as raw bits
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float64)


def _difference(a: np.ndarray, b: np.ndarray, lanes: np.ndarray, dtype: Any, n: int) -> str:
    """'' when a and b agree: exactly for integers and bools, up to rounding for floats."""
    if not dtype.is_floating():
        diff = int((a != b).sum())
        return f"{diff} of {a.size} differ" if diff else ""
    x, y = _as_float(a, dtype), _as_float(b, dtype)
    with _quiet():
        scale = np.max(np.abs(np.where(np.isfinite(lanes), _as_float(lanes, dtype), 0)), initial=0.0)
        rel = min(_MAX_REL, _ROUNDING_UNITS * n * 2.0**-dtype.fp_mantissa_width)
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        close = np.abs(x - y) <= rel * (np.abs(x) + np.abs(y) + scale)
    bad = ~(same | close)
    if not bad.any():
        return ""
    i = int(np.flatnonzero(bad.ravel())[0])
    first, second = float(x.ravel()[i]), float(y.ravel()[i])
    return f"{int(bad.sum())} of {a.size} differ, e.g. {first!r} against {second!r}"


def _hint_violation(data: np.ndarray, hint: str, claims: list[int], step: int) -> str:
    """'' when the hint holds on data. Checked on every lane, masked ones too: a hint is about the
    value, which the compiler uses for addresses whatever the mask. A scalar is a block of one."""
    data = data.reshape(1) if data.ndim == 0 else data
    for d, v in enumerate(claims[: data.ndim]):
        if v <= 1:
            continue
        lanes = np.moveaxis(data, d, -1)
        bad = _violation_along(lanes, hint, v, step)
        if bad:
            return f"dimension {d}: {bad}"
    return ""


def _violation_along(lanes: np.ndarray, hint: str, v: int, step: int) -> str:
    n = lanes.shape[-1]
    if hint == "multiple_of":
        # Triton: v divides the first element of every contiguous group; the groups the compiler sees
        # are unknown here, so the first element of every maximal contiguous run is checked.
        starts = np.ones(lanes.shape, dtype=bool)
        starts[..., 1:] = lanes[..., 1:] != lanes[..., :-1] + step
        bad = starts & (lanes % v != 0)
        return f"{int(bad.sum())} run start(s) not multiples of {v}" if bad.any() else ""
    g = min(v, n)
    if n % g:
        return f"{n} lanes do not split into groups of {v}"
    groups = lanes.reshape(*lanes.shape[:-1], n // g, g)
    want = step if hint == "max_contiguous" else 0
    bad = (groups[..., 1:] - groups[..., :-1]) != want
    if hint == "max_contiguous":
        # Triton's matmul tutorial hints (pid * B + arange(B)) % M: the last tile wraps to 0, lanes the
        # store mask then drops. A run restarting at 0 is accepted; a gather jumps elsewhere too.
        bad &= groups[..., 1:] != 0
    kind = "contiguous" if hint == "max_contiguous" else "constant"
    return f"{int(bad.any(axis=-1).sum())} group(s) of {g} not {kind}" if bad.any() else ""
