"""Instruments on the Triton interpreter (cpu pool): program order, exact bounds, cross-program races.

The interpreter runs a grid's programs one after another, in order. That hides concurrency bugs a GPU
shows, so every monitored launch here is instrumented:

- **program order**: the launch runs its programs in natural, reversed or shuffled order (the call's
  plan says which): ``set_grid_idx`` maps the k-th program the loop starts to a permuted program id;
- **bounds**: every load, store and atomic lane is checked against the element addresses of the
  launch's tensor arguments (views, not storages: row padding and guard bands are out of bounds);
  out-of-bounds lanes are dropped (never performed) and recorded;
- **races**: a shadow of each argument storage remembers which program last wrote each byte, and
  when. A program that reads what another program stored in the same launch, or overwrites it with a
  different value, depends on the order programs run in -- unless it acquired that store: the writer
  released it with an atomic after storing (``sem`` release or acq_rel) and the reader acquired it
  with an atomic on the same address before its access (vector clocks, interp_schedule.py);
- **interleaving**: launches of kernels that use atomics run their programs as interleaved
  coroutines (interp_schedule.py), so lost updates and wrong protocols show in the results;
- **stalls**: a program repeating the very same access (same addresses, same values) SPIN_LIMIT times
  in a row waits for another program: it is stopped and recorded (a GPU deadlocks there); in an
  interleaved launch, when every program in flight spins.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from orchestrator.verify import runtime_policy as rp
from orchestrator.verify.interp_schedule import Interleaving, StalledLaunch
from orchestrator.verify.interp_semantics import Semantics
from orchestrator.verify.monitor import Monitor
from orchestrator.verify.sampling import uses_atomics

_DATA_PTR = torch._C.TensorBase.data_ptr
_STORAGE = torch._C.TensorBase.untyped_storage
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
Clock = dict[int, int]  # program -> the launch's sequence number of its latest event known


def _join(into: Clock, other: Clock) -> None:
    for prog, seq in other.items():
        if into.get(prog, -1) < seq:
            into[prog] = seq


class ProgramStalled(RuntimeError):
    """A program of an interpreted launch waited on another one (see SPIN_LIMIT)."""


class _View:
    """The element addresses of one tensor argument."""

    def __init__(self, t: torch.Tensor) -> None:
        self.itemsize = t.element_size()
        self.base = int(_DATA_PTR(t))
        dims = [(int(s), int(st)) for s, st in zip(t.shape, t.stride(), strict=True) if s > 1 and st != 0]
        self.empty = t.numel() == 0
        self.span = (1 + sum((s - 1) * st for s, st in dims)) * self.itemsize if not self.empty else 0
        self.dims = sorted(dims, key=lambda d: -d[1])
        self.dense = self.span == len_product(dims) * self.itemsize
        self.negative = any(st < 0 for _, st in self.dims)
        storage = _STORAGE(t)
        self.storage = (int(storage.data_ptr()), int(storage.nbytes()))

    def contains(self, addrs: np.ndarray) -> np.ndarray:
        if self.empty:
            return np.zeros(addrs.shape, dtype=bool)
        rel = addrs.astype(np.int64) - self.base
        ok = (rel >= 0) & (rel + self.itemsize <= self.span)
        if self.dense or self.negative:
            return ok
        q, r = np.divmod(np.where(ok, rel, 0), self.itemsize)
        ok &= r == 0
        for size, stride in self.dims:
            idx = q // stride
            ok &= idx < size
            q = q - idx * stride
        return ok & (q == 0)


def len_product(dims: list[tuple[int, int]]) -> int:
    out = 1
    for size, _ in dims:
        out *= size
    return out


def _tensors(value: object) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _tensors(item)
    else:
        base = getattr(value, "base", None)  # TensorWrapper, TensorDescriptor
        if isinstance(base, torch.Tensor):
            yield base


class _Shadow:
    """Last writer (program id + 1; 0: none) and write sequence number of every byte of one storage."""

    def __init__(self, start: int, nbytes: int) -> None:
        self.start = start
        # Zeros, not -1: calloc'd pages cost nothing until a store touches them (device shapes are MBs).
        self.writer = np.zeros(nbytes, dtype=np.int32)
        self.seq = np.zeros(nbytes, dtype=np.int64)
        self.atomic = np.zeros(nbytes, dtype=bool)  # the last write was an atomic


class _Launch:
    def __init__(
        self, name: str, views: list[_View], order: str, rng: random.Random, monitor: Monitor
    ) -> None:
        self.name, self.views, self.order, self.rng, self.monitor = name, views, order, rng, monitor
        storages = sorted({v.storage for v in views})
        self.shadows = [_Shadow(start, size) for start, size in storages]
        self.starts = np.array([s.start for s in self.shadows], dtype=np.int64)
        self.perm: list[int] | None = None
        self.dims = (1, 1, 1)
        self.started = 0
        self.prog = -1
        self.seq = 0
        self.clocks: dict[int, Clock] = {}  # per program: what it has acquired (happens-before)
        self.released: dict[int, Clock] = {}  # per atomic byte address: what was released there
        self.spin_key: tuple[int, int] | None = None
        self.spin_count = 0
        self.sample: Any = None  # sampling.LaunchSample: a device-shape trial runs some programs
        self.interleaving: Interleaving | None = None  # set while the launch runs interleaved

    # --- schedule --------------------------------------------------------------------------------
    def set_dims(self, nx: int, ny: int, nz: int) -> None:
        if self.sample is not None:  # the loop runs the sampled programs; the real grid is theirs
            self.dims, self.perm, self.started = self.sample.dims, self.sample.programs, 0
            return
        self.dims = (nx, ny, nz)
        total = nx * ny * nz
        if self.order == "reversed":
            self.perm = list(range(total - 1, -1, -1))
        elif self.order == "shuffled":
            self.perm = list(range(total))
            self.rng.shuffle(self.perm)
        else:
            self.perm = None
        self.started = 0

    def next_program(self) -> tuple[int, int, int]:
        k = self.started
        self.started += 1
        m = self.perm[k] if self.perm is not None and k < len(self.perm) else k
        self.prog, self.spin_key, self.spin_count = m, None, 0
        _, ny, nz = self.dims
        x, rest = divmod(m, ny * nz)
        return x, *divmod(rest, nz)

    def yield_point(self) -> None:
        if self.interleaving is not None:
            self.interleaving.point()

    # --- bounds ----------------------------------------------------------------------------------
    def in_bounds(self, addrs: np.ndarray) -> np.ndarray:
        ok = np.zeros(addrs.shape, dtype=bool)
        for view in self.views:
            ok |= view.contains(addrs)
        return ok

    def _shadow_index(self, addrs: np.ndarray) -> Iterator[tuple[_Shadow, np.ndarray, np.ndarray]]:
        if not len(self.shadows) or not addrs.size:
            return
        signed = addrs.astype(np.int64)
        which = np.searchsorted(self.starts, signed, side="right") - 1
        for i in np.unique(which):
            if i < 0:
                continue
            shadow = self.shadows[i]
            lanes = which == i
            offs = signed[lanes] - shadow.start
            inside = (offs >= 0) & (offs < shadow.writer.size)
            yield shadow, np.flatnonzero(lanes)[inside], offs[inside]

    # --- cross-program accesses ------------------------------------------------------------------
    def _ordered(self, writer: int, wseq: int) -> bool:
        """The running program acquired the writer's store (a release/acquire chain since it)."""
        return self.clocks.get(self.prog, {}).get(writer, -1) >= wseq

    def synchronise(self, addrs: np.ndarray, acquire: bool, release: bool) -> None:
        """An atomic of the running program on these element addresses, with its memory order."""
        clock = self.clocks.setdefault(self.prog, {})
        keys = [int(a) for a in np.unique(addrs)]
        if acquire:
            for key in keys:
                if key in self.released:
                    _join(clock, self.released[key])
        if release:
            clock[self.prog] = self.seq
            for key in keys:
                _join(self.released.setdefault(key, {}), clock)

    def _foreign(self, addrs: np.ndarray, atomic: bool = False) -> list[tuple[np.ndarray, int, int]]:
        """(lanes, writer, write seq) for lanes last written by another program in this launch (by a
        plain store, for an atomic access: atomics on one address never race each other)."""
        out = []
        for shadow, lanes, offs in self._shadow_index(addrs):
            writers = shadow.writer[offs] - 1
            foreign = (writers >= 0) & (writers != self.prog)
            if atomic:
                foreign &= ~shadow.atomic[offs]
            for w in np.unique(writers[foreign]):
                hit = foreign & (writers == w)
                out.append((lanes[hit], int(w), int(shadow.seq[offs[hit]].max())))
        return out

    def on_read(self, addrs: np.ndarray, atomic: bool = False) -> None:
        if self.sample is not None and not atomic:
            self.sample.read(self.prog, addrs)
        for _, writer, wseq in self._foreign(addrs, atomic):
            self._cross(writer, wseq, f"program {self.prog} reads what program {writer} stored")

    def on_write(self, addrs: np.ndarray, old: np.ndarray | None, new: np.ndarray | None) -> None:
        for lanes, writer, wseq in self._foreign(addrs):
            if old is not None and new is not None and np.array_equal(old[lanes], new[lanes]):
                continue  # the same value again: benign
            self._cross(
                writer, wseq, f"programs {writer} and {self.prog} store different values to one element"
            )

    def _cross(self, writer: int, wseq: int, what: str) -> None:
        if not self._ordered(writer, wseq):
            how = "interleaved" if self.interleaving is not None else f"{self.order} order"
            self.monitor.record(
                "order",
                f"{self.name}: {what} in the same launch, without a release/acquire between ({how})",
            )

    def mark(self, addrs: np.ndarray, itemsize: int, *, atomic: bool) -> None:
        self.seq += 1
        spread = (addrs.astype(np.int64)[:, None] + np.arange(itemsize)).ravel()
        if self.sample is not None:
            self.sample.write(self.prog, spread, atomic=atomic)
        for shadow, _, offs in self._shadow_index(spread.astype(np.uint64)):
            shadow.writer[offs] = self.prog + 1
            shadow.seq[offs] = self.seq
            shadow.atomic[offs] = atomic
        if self.interleaving is not None and not atomic:  # an atomic's progress shows in its result
            self.interleaving.stored()

    def spin(self, addrs: np.ndarray, values: np.ndarray) -> None:
        key = (hash(addrs.tobytes()), hash(np.ascontiguousarray(values).tobytes()))
        if self.interleaving is not None:  # a spinning program yields; a stall is all of them
            repeated, self.spin_key = key == self.spin_key, key
            try:
                self.interleaving.accessed(repeated)
            except StalledLaunch as exc:
                self.monitor.record("order", f"{self.name}: {exc} (interleaved)")
                self.monitor.stalled = True
                raise ProgramStalled(f"{exc} in {self.name}") from None
            return
        if key == self.spin_key:
            self.spin_count += 1
            if self.spin_count >= rp.SPIN_LIMIT:
                self.monitor.record(
                    "order", f"{self.name}: program {self.prog} waits on another program (spin)"
                )
                self.monitor.stalled = True
                raise ProgramStalled(f"program {self.prog} of {self.name} waits on another program")
        else:
            self.spin_key, self.spin_count = key, 0


class InterpreterInstruments:
    """Installed for monitored calls on the cpu pool; removed for blind calls."""

    def __init__(self, monitor: Monitor, schedule_seed: int) -> None:
        from triton.runtime import interpreter

        self.I = interpreter
        self.monitor = monitor
        self.builder = interpreter.interpreter_builder
        self.cls = type(self.builder)
        self.order = "natural"
        self.launch: _Launch | None = None
        self.launches = 0
        self.seed = schedule_seed
        self.inputs: list[torch.Tensor] = []  # the trial's input tensors (set by the runner)
        self.sampling: Any = None  # sampling.Sampling during a device-shape call (set by the runner)
        self.original_call = interpreter.GridExecutor.__call__
        self.wrappers = {
            "set_grid_dim": self._set_grid_dim,
            "set_grid_idx": self._set_grid_idx,
            "create_masked_load": self._masked_load,
            "create_masked_store": self._masked_store,
            "create_atomic_rmw": self._atomic_rmw,
            "create_atomic_cas": self._atomic_cas,
            "create_atomic_load": self._atomic_load,
            "create_atomic_store": self._atomic_store,
            "create_atomic_poll": self._atomic_poll,
        }
        instruments = self

        def call(executor: Any, *args: Any, **kwargs: Any) -> Any:
            return instruments._grid_call(executor, *args, **kwargs)

        self.grid_call = call
        # What Triton leaves unspecified (hints, association order, ties, read-only inputs).
        self.semantics = Semantics(self)

    def install(self) -> None:
        self.I.GridExecutor.__call__ = self.grid_call
        for name, wrapper in self.wrappers.items():
            setattr(self.builder, name, wrapper)
        self.semantics.install()

    def uninstall(self) -> None:
        self.semantics.uninstall()
        self.I.GridExecutor.__call__ = self.original_call
        for name in self.wrappers:
            self.builder.__dict__.pop(name, None)

    def _orig(self, name: str) -> Any:
        return getattr(self.cls, name).__get__(self.builder)

    def _grid_call(self, executor: Any, *args: Any, **kwargs: Any) -> Any:
        views = [_View(t) for value in (*args, *kwargs.values()) for t in _tensors(value)]
        self.launches += 1
        rng = random.Random(f"{self.seed}:{self.launches}")
        name = getattr(executor.fn, "__name__", "kernel")
        outer, self.launch = self.launch, _Launch(name, views, self.order, rng, self.monitor)
        if self.sampling is not None:  # a device shape: only a sample of the programs runs
            executor = self.sampling.launch(executor, self.launch)
        try:
            if uses_atomics(getattr(executor, "fn", None)):  # programs may talk: interleave them
                self.launch.interleaving = Interleaving(self.I, self.launch, rng)
                return self.launch.interleaving.run(executor, args, kwargs)
            return self.original_call(executor, *args, **kwargs)
        finally:
            self.launch = outer

    # --- builder wrappers ------------------------------------------------------------------------
    def _set_grid_dim(self, nx: int, ny: int, nz: int) -> None:
        if self.launch is not None:
            self.launch.set_dims(nx, ny, nz)
            nx, ny, nz = self.launch.dims  # the real grid (a sampled loop runs fewer programs)
        self._orig("set_grid_dim")(nx, ny, nz)

    def _set_grid_idx(self, x: int, y: int, z: int) -> None:
        if self.launch is not None:
            x, y, z = self.launch.next_program()
        self._orig("set_grid_idx")(x, y, z)

    def _lanes(self, ptrs: Any, mask: Any) -> tuple[np.ndarray, np.ndarray]:
        addrs = np.asarray(ptrs.data)
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), addrs.shape).copy()
        return addrs, active

    def _drop_oob(self, addrs: np.ndarray, active: np.ndarray, kind: str) -> np.ndarray:
        launch = self.launch
        assert launch is not None
        ok = launch.in_bounds(addrs[active])
        if not ok.all():
            self.monitor.record(
                kind, f"{launch.name}: {int((~ok).sum())} lane(s) outside every tensor argument"
            )
            idx = np.flatnonzero(active.ravel())[~ok]
            flat = active.ravel()
            flat[idx] = False
            active = flat.reshape(addrs.shape)
        return active

    def _masked_load(self, ptrs: Any, mask: Any, other: Any, cache_policy: Any, is_volatile: Any) -> Any:
        launch = self.launch
        if launch is None:
            return self._orig("create_masked_load")(ptrs, mask, other, cache_policy, is_volatile)
        launch.yield_point()
        addrs, active = self._lanes(ptrs, mask)
        active = self._drop_oob(addrs, active, "oob_read")
        mask = self.I.TensorHandle(active, mask.dtype)
        launch.on_read(addrs[active])
        result = self._orig("create_masked_load")(ptrs, mask, other, cache_policy, is_volatile)
        launch.spin(addrs[active], np.asarray(result.data)[active] if np.ndim(result.data) else result.data)
        return result

    def _old_values(self, addrs: np.ndarray, dtype: np.dtype) -> np.ndarray:
        flat = addrs.astype(np.uint64)
        raw = self.I._interpreter.load(
            flat, np.ones(flat.shape, dtype=bool), np.zeros(flat.shape, dtype), dtype
        )
        return np.asarray(raw).view(_UINT[dtype.itemsize])

    def _masked_store(self, ptrs: Any, value: Any, mask: Any, cache_policy: Any) -> Any:
        launch = self.launch
        if launch is None:
            return self._orig("create_masked_store")(ptrs, value, mask, cache_policy)
        launch.yield_point()
        addrs, active = self._lanes(ptrs, mask)
        active = self._drop_oob(addrs, active, "oob_write")
        mask = self.I.TensorHandle(active, mask.dtype)
        values = np.broadcast_to(np.asarray(value.data), addrs.shape)
        dtype = values.dtype
        hit = addrs[active]
        if dtype.itemsize in _UINT and hit.size:
            new = np.ascontiguousarray(values[active]).view(_UINT[dtype.itemsize])
            launch.on_write(hit, self._old_values(hit, dtype), new)
        self.semantics.check_store(hit, "a store")
        result = self._orig("create_masked_store")(ptrs, value, mask, cache_policy)
        launch.mark(hit, dtype.itemsize, atomic=False)
        launch.spin_key = None
        return result

    def _order(self, sem: Any, scope: Any) -> tuple[bool, bool]:
        """(acquires, releases) across programs: a CTA-scoped atomic orders nothing between them."""
        ir = self.I._ir
        if scope == ir.MEM_SYNC_SCOPE.CTA:
            return False, False
        both = sem == ir.MEM_SEMANTIC.ACQUIRE_RELEASE
        return both or sem == ir.MEM_SEMANTIC.ACQUIRE, both or sem == ir.MEM_SEMANTIC.RELEASE

    def _atomic_rmw(self, op: Any, ptr: Any, val: Any, mask: Any, sem: Any, scope: Any) -> Any:
        launch = self.launch
        if launch is None:
            return self._orig("create_atomic_rmw")(op, ptr, val, mask, sem, scope)
        launch.yield_point()
        addrs, active = self._lanes(ptr, mask)
        active = self._drop_oob(addrs, active, "oob_write")
        mask = self.I.TensorHandle(active, mask.dtype)
        hit = addrs[active]
        launch.on_read(hit, atomic=True)
        launch.synchronise(hit, *self._order(sem, scope))
        result = self._orig("create_atomic_rmw")(op, ptr, val, mask, sem, scope)
        self.semantics.check_store(hit, "an atomic")
        launch.mark(hit, np.asarray(val.data).dtype.itemsize, atomic=True)
        launch.spin(hit, np.broadcast_to(np.asarray(result.data), addrs.shape)[active])
        return result

    def _atomic_cas(self, ptr: Any, cmp: Any, val: Any, sem: Any, scope: Any) -> Any:
        launch = self.launch
        if launch is None:
            return self._orig("create_atomic_cas")(ptr, cmp, val, sem, scope)
        launch.yield_point()
        addrs = np.asarray(ptr.data)
        if not launch.in_bounds(addrs.ravel()).all():
            self.monitor.record(
                "oob_write", f"{launch.name}: an atomic_cas lane outside every tensor argument"
            )
            raise IndexError("atomic_cas outside every tensor argument")
        self.semantics.check_store(addrs, "an atomic_cas")
        launch.on_read(addrs.ravel(), atomic=True)
        launch.synchronise(addrs.ravel(), *self._order(sem, scope))
        result = self._orig("create_atomic_cas")(ptr, cmp, val, sem, scope)
        launch.mark(addrs.ravel(), np.asarray(val.data).dtype.itemsize, atomic=True)
        launch.spin(addrs.ravel(), np.asarray(result.data).ravel())
        return result

    def _atomic_load(self, ptr: Any, mask: Any, sem: Any, scope: Any) -> Any:
        launch = self.launch
        if launch is None:
            return self._orig("create_atomic_load")(ptr, mask, sem, scope)
        launch.yield_point()
        if mask is None:
            mask = self.I.TensorHandle(np.ones_like(ptr.data, dtype=bool), self.I.tl.int1)
        addrs, active = self._lanes(ptr, mask)
        active = self._drop_oob(addrs, active, "oob_read")
        mask = self.I.TensorHandle(active, mask.dtype)
        launch.on_read(addrs[active], atomic=True)
        launch.synchronise(addrs[active], self._order(sem, scope)[0], False)
        result = self._orig("create_masked_load")(ptr, mask, None, None, True)
        launch.spin(addrs[active], np.asarray(result.data)[active] if np.ndim(result.data) else result.data)
        return result

    def _atomic_store(self, ptr: Any, val: Any, mask: Any, sem: Any, scope: Any) -> Any:
        launch = self.launch
        if launch is None:
            return self._orig("create_atomic_store")(ptr, val, mask, sem, scope)
        launch.yield_point()
        if mask is None:
            mask = self.I.TensorHandle(np.ones_like(ptr.data, dtype=bool), self.I.tl.int1)
        addrs, active = self._lanes(ptr, mask)
        active = self._drop_oob(addrs, active, "oob_write")
        mask = self.I.TensorHandle(active, mask.dtype)
        hit = addrs[active]
        self.semantics.check_store(hit, "an atomic store")
        launch.on_read(hit, atomic=True)  # over another program's plain store: a race too
        launch.synchronise(hit, False, self._order(sem, scope)[1])
        result = self._orig("create_masked_store")(ptr, val, mask, None)
        launch.mark(hit, np.asarray(val.data).dtype.itemsize, atomic=True)
        launch.spin_key = None
        if launch.interleaving is not None:
            launch.interleaving.stored()
        return result

    def _atomic_poll(self, ptr: Any, expected: Any, timeout_ns: Any, sem: Any, scope: Any) -> Any:
        """Triton's poll loop, one element at a time through the atomic load (so it can yield)."""
        if self.launch is None:
            return self._orig("create_atomic_poll")(ptr, expected, timeout_ns, sem, scope)
        matched = np.zeros(np.shape(ptr.data), dtype=np.bool_)
        start = time.perf_counter_ns()
        limit = None if timeout_ns is None else int(np.asarray(timeout_ns.data).item())
        for index in np.ndindex(np.shape(ptr.data)):
            element = self.I.TensorHandle(np.asarray(ptr.data[index]), ptr.dtype)
            while True:
                value = self._atomic_load(element, None, sem, scope)
                if np.asarray(value.data).item() == np.asarray(expected.data)[index]:
                    matched[index] = True
                    break
                if limit is not None and time.perf_counter_ns() - start >= limit:
                    break
        return self.I.TensorHandle(matched, self.I.tl.int1)
