"""Child-side instrumentation around the candidate's calls.

- Counts Triton kernel launches by wrapping ``JITFunction.run`` / ``InterpretedFunction.run`` (what
  ``kernel[grid](...)`` calls).
- Records aten ops the candidate's host code issues outside a launch (a TorchDispatchMode); anything
  outside the allocation/view allow-list is reported as runtime torch compute.
- Replaces every ``torch.empty``-style allocation with a guarded one (canary bands around it) filled
  with a sentinel, so unwritten outputs and out-of-bounds stores become visible.

All of this runs in the candidate's own process, so it is evidence of cheating when it fires and is
never taken as proof of honesty: the parent's comparisons decide the verdict.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from orchestrator.verify import policy
from orchestrator.verify.guards import guard_intact, guarded_empty, sentinel_value


class Monitor:
    """Per-trial counters; one instance per child process, reset before each trial."""

    def __init__(self) -> None:
        self.launches = 0
        self.ops: list[str] = []
        self._launch_depth = 0
        self._allocations: list[torch.Tensor] = []

    def reset(self) -> None:
        self.launches = 0
        self.ops = []
        self._allocations = []

    @property
    def in_launch(self) -> bool:
        return self._launch_depth > 0

    @contextmanager
    def launching(self) -> Iterator[None]:
        # The interpreter itself issues aten ops while it runs a grid: those are not the candidate's.
        self._launch_depth += 1
        try:
            yield
        finally:
            self._launch_depth -= 1

    def oob(self) -> bool:
        """True when a guard band of any allocation made during the trial was overwritten."""
        return any(guard_intact(t) is False for t in self._allocations)

    @contextmanager
    def watch(self) -> Iterator[None]:
        with _Mode(self):
            yield

    def handle(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.in_launch:
            return func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in policy.RUNTIME_ALLOC_OPS:
            return self._guarded(func(*args, **kwargs), zero=name in policy.RUNTIME_ZERO_OPS)
        if name not in policy.RUNTIME_VIEW_OPS:
            self.ops.append(str(func))
        return func(*args, **kwargs)

    def _guarded(self, plain: object, *, zero: bool) -> object:
        if not isinstance(plain, torch.Tensor) or plain.device.type == "meta":
            return plain
        out = guarded_empty(plain.shape, plain.stride(), plain.dtype, plain.device)
        if zero:
            out.zero_()
        else:
            value = sentinel_value(plain.dtype)
            if value is not None:
                out.fill_(value)
        if plain.requires_grad:
            out.requires_grad_(True)
        self._allocations.append(out)
        return out


class _Mode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Otherwise torch wraps __torch_dispatch__ in a dynamo guard whose first call imports
        # torch._dynamo (~4 s per child). Nothing here is ever compiled.
        return False

    def __init__(self, monitor: Monitor) -> None:
        super().__init__()
        self.monitor = monitor

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        return self.monitor.handle(func, args, kwargs or {})


def _wrap_run(original: Callable[..., Any], monitor: Monitor) -> Callable[..., Any]:
    @functools.wraps(original)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("warmup"):  # compile-only, nothing runs
            return original(self, *args, **kwargs)
        monitor.launches += 1
        with monitor.launching():
            return original(self, *args, **kwargs)

    return run


@contextmanager
def launch_hooks(monitor: Monitor) -> Iterator[None]:
    """Count kernel launches for the duration of the block (class-level patch, restored after)."""
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    # Autotuner/Heuristics allocate and benchmark inside run(): that is Triton's work, not host compute.
    classes = (JITFunction, InterpretedFunction, Autotuner, Heuristics)
    originals: dict[type, Callable[..., Any]] = {
        cls: cls.__dict__["run"] for cls in classes if "run" in cls.__dict__
    }
    for cls, original in originals.items():
        cls.run = _wrap_run(original, monitor)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for cls, original in originals.items():
            cls.run = original  # type: ignore[method-assign]
