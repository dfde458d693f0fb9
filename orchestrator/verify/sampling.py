"""Device shapes on the cpu pool, child side: run a sample of each launch's programs
and keep track of which bytes the sample computed faithfully.

A device shape (the task's ``SHAPES``) has far too many programs for the interpreter, so a sampled
call runs, per launch, the programs at every boundary of the grid (first and last index along each
axis, crossed), a few random ones, and on one-dimensional grids the programs that would own the last
element of an argument under a grid-stride loop (so a persistent kernel's tail runs). Index sets are
drawn per axis *length* with the call's seed, so launches over the same rows pick the same rows and
a multi-launch pipeline stays followable. Small launches, and launches of kernels that use atomics
(a partial accumulation is not a result), run whole when they are small enough.

Skipped programs leave memory that is not what the device would hold, so every byte touched by the
call has a state: INVALID (never written: the job's allocation sentinel, or memory of unknown
provenance), READY (an input, zeros or a copy: right before the call), WRITTEN (stored in this call by
an executed program from valid data) or SPOILED (stored in this call, but from invalid data). A
program that loads an INVALID or SPOILED byte is tainted and everything it stores is SPOILED; atomics
of a sampled launch spoil what they touch (the skipped programs' contributions are missing) and taint
the program that issued them (what it does next may wait on, or read, what the skipped ones did). The
parent compares only WRITTEN elements of each output; unsampled calls never get here.

Loaded in the child only (spawn.BUNDLE), before interp.py, which calls it from its launch loop.
"""

from __future__ import annotations

import random
import types
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from orchestrator.verify.guards import GuardParams, sentinel_mask

INVALID, READY, WRITTEN, SPOILED = 0, 1, 2, 3
_STORAGE = torch._C.TensorBase.untyped_storage
MAX_BLOCK_LOG2 = 10  # grid-stride residues for blocks of 1, 2, 4 ... 1024 elements
MAX_RESIDUES = 8
SMALL_AXIS = 8  # an axis this short runs whole


@dataclass(frozen=True)
class SampleRequest:
    """What the parent asks of a device-shape trial (sent in its TrialPlan)."""

    seed: int
    programs: int = 12  # about how many programs per launch (boundaries included)
    full_below: int = 32  # a launch of at most this many programs runs whole
    atomic_full_below: int = 256  # the same for kernels that use atomics

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: object) -> SampleRequest:
        if not isinstance(raw, dict):
            raise ValueError("bad sample request")
        return cls(**{k: int(v) for k, v in raw.items() if k in cls.__dataclass_fields__})


def uses_atomics(fn: object, depth: int = 0) -> bool:
    """The kernel (or a jitted function it calls) names an atomic: its launches run whole if small."""
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType) or depth > 4:
        return False
    names = set(_names(code))
    if any(n.startswith("atomic_") for n in names):
        return True
    scope = getattr(fn, "__globals__", {})
    return any(uses_atomics(getattr(scope.get(n), "fn", None), depth + 1) for n in names)


def _names(code: types.CodeType) -> list[str]:
    out = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out += _names(const)
    return out


def axis_indices(n: int, count: int, seed: int, sizes: Sequence[int] = ()) -> list[int]:
    """First, last, grid-stride residues of ``sizes`` and random indices of an axis of length n.

    The random part depends only on (seed, n): launches over the same length pick the same indices.
    """
    if n <= max(count, SMALL_AXIS):  # short axes (column blocks, K splits) run whole: pipelines
        return list(range(n))
    chosen = {0, n - 1}
    # Blocks of one element (row-stride loops) and of 1024 down to 64 first: the common ones.
    blocks = [0, *range(MAX_BLOCK_LOG2, 0, -1)]
    residues = dict.fromkeys(((s - 1) >> b) % n for b in blocks for s in sizes if s > n)
    chosen.update(list(residues)[:MAX_RESIDUES])
    rng = random.Random(f"{seed}:{n}")
    chosen.update(rng.sample(range(1, n - 1), k=min(max(count - 2, 0), n - 2)))
    return sorted(chosen)


class Sampling:
    """One sampled call: which programs each launch runs, and the state of every byte it touched."""

    def __init__(
        self,
        request: SampleRequest,
        inputs: Sequence[torch.Tensor],
        allocations: Callable[[], list[torch.Tensor]],
        params: GuardParams,
    ) -> None:
        self.request = request
        self.inputs = {int(_STORAGE(t).data_ptr()) for t in inputs}
        self.allocations = allocations  # the monitor's allocations of this call (filled as it runs)
        self.params = params
        self.states: dict[int, np.ndarray] = {}  # storage start -> one state byte per storage byte
        self.starts = np.zeros(0, dtype=np.int64)
        self.launches = self.full_launches = self.ran = self.total = 0
        # An atomic ran in a sampled launch: a program may have waited for skipped ones (a ticket,
        # "the last block writes"), so an output nobody wrote proves nothing (parent: not judged).
        self.atomics_sampled = False

    # --- memory states -------------------------------------------------------------------------
    def track(self, start: int, nbytes: int) -> None:
        if start in self.states or nbytes == 0:
            return
        self.states[start] = self._initial(start, nbytes)
        self.starts = np.array(sorted(self.states), dtype=np.int64)

    def _initial(self, start: int, nbytes: int) -> np.ndarray:
        if start in self.inputs:
            return np.full(nbytes, READY, dtype=np.uint8)
        for t in self.allocations():  # zeros and copies are ready, the sentinel is not
            if int(_STORAGE(t).data_ptr()) == start:
                return _allocation_state(t, nbytes, self.params)
        return np.zeros(nbytes, dtype=np.uint8)  # provenance unknown (e.g. state from an earlier call)

    def locate(self, addrs: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """(state array, offsets) for the addresses inside tracked storages."""
        if not self.states or not addrs.size:
            return []
        signed = addrs.astype(np.int64)
        which = np.searchsorted(self.starts, signed, side="right") - 1
        out = []
        for i in np.unique(which):
            if i < 0:
                continue
            start = int(self.starts[i])
            state = self.states[start]
            offs = signed[which == i] - start
            out.append((state, offs[(offs >= 0) & (offs < state.size)]))
        return out

    def output_state(self, out: torch.Tensor) -> torch.Tensor:
        """Per element of ``out`` (uint8): WRITTEN if every byte is, INVALID if no byte was ever
        written nor ready, SPOILED if some byte was written from invalid data, else READY."""
        storage = _STORAGE(out)
        start, nbytes = int(storage.data_ptr()), int(storage.nbytes())
        state = self.states.get(start)
        if state is None:  # no launch touched it
            state = self._initial(start, nbytes)
        size = out.element_size()
        if out.numel() == 0 or nbytes < size:
            return torch.zeros(out.shape, dtype=torch.uint8)
        b = state[: nbytes // size * size].reshape(-1, size)
        touched = ((b == WRITTEN) | (b == SPOILED)).any(axis=1)
        ready = (b == READY).all(axis=1)
        per = np.where(
            (b == WRITTEN).all(axis=1), WRITTEN, np.where(touched, SPOILED, np.where(ready, READY, INVALID))
        )
        whole = torch.from_numpy(per.astype(np.uint8))
        return whole.as_strided(tuple(out.shape), tuple(out.stride()), out.storage_offset()).clone()

    def summary(self) -> str:
        whole = f"; {self.full_launches} launch(es) run whole" if self.full_launches else ""
        return (
            f"{self.ran} of {self.total} programs in {self.launches} launch(es) "
            f"(boundaries, grid-stride tails and random){whole}"
        )

    # --- launches ------------------------------------------------------------------------------
    def launch(self, executor: Any, launch: Any) -> Any:
        """A copy of the executor whose grid runs only the sampled programs (see LaunchSample)."""
        sample = LaunchSample(self, launch, uses_atomics(getattr(executor, "fn", None)))
        launch.sample = sample
        for view in launch.views:
            self.track(*view.storage)
        # A plain copy by hand: copy.copy would cache __slotnames__ on Triton's class (integrity.py).
        wrapped = object.__new__(type(executor))
        wrapped.__dict__.update(vars(executor))
        wrapped.grid = sample.grid_of(executor.grid)
        return wrapped


def _allocation_state(t: torch.Tensor, nbytes: int, params: GuardParams) -> np.ndarray:
    state = np.full(nbytes, READY, dtype=np.uint8)
    mask = sentinel_mask(t, params)
    if mask is None or t.numel() == 0 or not t.is_contiguous():
        return state
    size = t.element_size()
    first = t.storage_offset() * size
    flags = np.where(mask.reshape(-1).numpy(), INVALID, READY).astype(np.uint8)
    state[first : first + flags.size * size] = np.repeat(flags, size)
    return state


class LaunchSample:
    """The programs one launch runs and what they read and write."""

    def __init__(self, call: Sampling, launch: Any, atomics: bool) -> None:
        self.call, self.launch, self.atomics = call, launch, atomics
        self.dims = (1, 1, 1)
        self.programs: list[int] = []
        self.full = True
        self.tainted: set[int] = set()

    def grid_of(self, real: Any) -> Callable[[Any], tuple[int, ...]]:
        def grid(args: Any) -> tuple[int, ...]:
            dims = tuple(int(d) for d in (real(args) if callable(real) else real))
            self.choose(dims + (1,) * (3 - len(dims)))
            return (len(self.programs),)  # the interpreter's loop runs this many; set_dims maps them

        return grid

    def choose(self, dims: tuple[int, ...]) -> None:
        if len(dims) != 3:
            raise ValueError("grid must have at most 3 dimensions")
        self.dims = (dims[0], dims[1], dims[2])
        nx, ny, nz = self.dims
        total = nx * ny * nz
        req, call = self.call.request, self.call
        self.full = total <= req.full_below or (self.atomics and total <= req.atomic_full_below)
        if self.full:
            programs = list(range(total))
        else:
            axes = [n for n in self.dims if n > 1]
            count = max(2, round(req.programs ** (1 / max(len(axes), 1))))  # 2: the ends only
            sizes = self._sizes() if len(axes) == 1 else []
            per_axis = [axis_indices(n, count, req.seed, sizes) for n in self.dims]
            programs = [(x * ny + y) * nz + z for x in per_axis[0] for y in per_axis[1] for z in per_axis[2]]
        if self.launch.order == "shuffled":
            self.launch.rng.shuffle(programs)
        elif self.launch.order == "reversed":
            programs.reverse()
        self.programs = programs
        call.launches += 1
        call.full_launches += int(self.full)
        call.ran += len(programs)
        call.total += total

    def _sizes(self) -> list[int]:
        """Every dimension and element count of the launch's tensor arguments (grid-stride tails)."""
        sizes: set[int] = set()
        for view in self.launch.views:
            sizes.update(s for s, _ in view.dims)
            sizes.add(view.span // max(view.itemsize, 1))
        return sorted(sizes)

    # --- memory (called from interp._Launch.on_read / mark) --------------------------------------
    def read(self, prog: int, addrs: np.ndarray) -> None:
        if prog in self.tainted:
            return
        for state, offs in self.call.locate(addrs):
            if offs.size and _bad(state[offs]).any():
                self.tainted.add(prog)
                return

    def write(self, prog: int, byte_addrs: np.ndarray, *, atomic: bool) -> None:
        for state, offs in self.call.locate(byte_addrs):
            if atomic and not self.full:
                # The skipped programs' contributions are missing, and what this program does after
                # its atomic (a ticket, a lock, a flag) may depend on them: it is tainted from here.
                state[offs] = SPOILED
                self.call.atomics_sampled = True
                self.tainted.add(prog)
                continue
            if atomic and _bad(state[offs]).any():  # an atomic reads the old value too
                self.tainted.add(prog)
            state[offs] = SPOILED if prog in self.tainted else WRITTEN


def _bad(states: np.ndarray) -> np.ndarray:
    """Bytes whose value is not what the device would hold (never written, or spoiled)."""
    return (states == INVALID) | (states == SPOILED)
