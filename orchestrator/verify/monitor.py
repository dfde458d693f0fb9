"""Child-side monitor: what the candidate's code does while it runs (import and every monitored call).

- A TorchDispatchMode sees every aten op; ops attributed to the candidate's frames (attribution.py)
  are judged: allocations get a guarded, poisoned buffer, views pass, anything else is recorded as
  torch compute. Ops Triton issues for itself (interpreter argument copies) pass untouched, but a grid
  lambda, a heuristic or an autotune hook is the candidate's code wherever it runs.
- Kernel launches are counted by wrapping ``run`` of JITFunction / InterpretedFunction / Autotuner /
  Heuristics, which also checks that every host-side callable handed to Triton (grid, heuristics,
  autotune hooks and pruners) is the candidate's own Python code: a builtin or a torch function there
  would run with no candidate frame on the stack, unseen.

All of this runs in the candidate's own process: it is evidence when it fires and is never taken as
proof of honesty; the parent's comparison decides.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from orchestrator.verify import runtime_policy as rp
from orchestrator.verify.attribution import CANDIDATE, TRUSTED, Attribution
from orchestrator.verify.guards import GuardParams, allocation_of, bands_intact, fill_sentinel, guarded_empty

MAX_DETAILS = 50
_STORAGE = torch._C.TensorBase.untyped_storage  # no subclass override, no host-read guard


class Monitor:
    """Findings of the current window (import or one call); one instance per child process."""

    def __init__(self, attribution: Attribution, params: GuardParams) -> None:
        self.attribution = attribution
        self.params = params
        self.window = False  # True while candidate code runs under observation
        self.launches = 0
        self.findings: dict[str, list[str]] = {}
        self.allocations: list[torch.Tensor] = []
        self.stalled = False  # the interpreter stopped a program that waited on another one
        # An unguarded monitored call (the plan's `guarded: False`): allocations stay plain, exactly
        # as in a blind call, while every other instrument watches.
        self.plain = False
        # The call's arguments (set by the runner per trial; empty when the task allows input copies):
        # an aten copy of their data issued by the candidate is torch compute, however it is spelled.
        self.inputs: list[object] = []
        self._launch_depth = 0
        # Every new finding is also sent to the parent at once (set by the runner): what was sent
        # stays sent, even if the candidate then forges the rest of the stream and exits.
        self.emit: Callable[[str, str], None] | None = None

    def reset(self) -> None:
        self.launches = 0
        self.findings = {}
        self.allocations = []
        self.stalled = False

    def record(self, kind: str, detail: str) -> None:
        bucket = self.findings.setdefault(kind, [])
        if detail not in bucket and len(bucket) < MAX_DETAILS:
            bucket.append(detail)
            if self.emit is not None:
                self.emit(kind, detail)

    def by_candidate(self, frame: types.FrameType | None, *, direct: bool = False) -> bool:
        return self.window and self.attribution.is_candidate(frame, direct=direct)

    @contextmanager
    def observing(self) -> Iterator[None]:
        self.window = True
        try:
            yield
        finally:
            self.window = False

    def scratch_damaged(self) -> bool:
        """A guard band of an allocation made during the window was overwritten (device pools)."""
        for t in self.allocations:
            alloc = allocation_of(t, self.params)
            if alloc is not None and not bands_intact(t, alloc, self.params):
                return True
        return False

    # --- dispatch -------------------------------------------------------------------------------
    def handle(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], caller: Any) -> Any:
        if not self.by_candidate(caller):
            return func(*args, **kwargs)
        name = func.overloadpacket.__name__
        copied = self._input_copied(name, args)
        if copied is not None:
            self.record("torch_compute", f"a host-side copy of input {copied}'s data ({func})")
            return func(*args, **kwargs)
        if name in rp.ALLOC_OPS:
            return self._guarded(func(*args, **kwargs), zero=name in rp.ZERO_OPS)
        if name in rp.COPY_OPS:
            return self._guarded_copy(func(*args, **kwargs))
        if name not in rp.VIEW_OPS:
            self.record("torch_compute", str(func))
        return func(*args, **kwargs)

    def _input_copied(self, name: str, args: tuple[Any, ...]) -> int | None:
        """The index of the input whose data this op copies (clone, copy_, _to_copy, *_copy), if any.

        Decided by storage, not by spelling: a helper's `t.contiguous()` on a strided input is the
        same clone as a direct one. A no-op `.contiguous()` issues no op at all and never gets here."""
        if not self.inputs or not (name in rp.INPUT_COPY_OPS or name.endswith("_copy")):
            return None
        source = args[1] if name == "copy_" and len(args) > 1 else args[0] if args else None
        if not isinstance(source, torch.Tensor) or source.device.type == "meta":
            return None
        where = _STORAGE(source).data_ptr()
        if where == 0:  # an empty storage has no data to copy (and every empty one reads 0)
            return None
        for index, item in enumerate(self.inputs):
            if isinstance(item, torch.Tensor) and _STORAGE(item).data_ptr() == where:
                return index
        return None

    def _guarded(self, plain: object, *, zero: bool) -> object:
        if not isinstance(plain, torch.Tensor) or plain.device.type == "meta" or self.plain:
            return plain
        out = guarded_empty(plain.shape, plain.stride(), plain.dtype, plain.device, self.params)
        if zero:
            out.zero_()
        else:
            fill_sentinel(out, self.params)
        if plain.requires_grad:
            out.requires_grad_(True)
        self.allocations.append(out)
        return out

    def _guarded_copy(self, plain: object) -> object:
        if not isinstance(plain, torch.Tensor) or plain.device.type == "meta" or self.plain:
            return plain
        out = guarded_empty(plain.shape, plain.stride(), plain.dtype, plain.device, self.params)
        out.copy_(plain)
        self.allocations.append(out)
        return out

    # --- launches -------------------------------------------------------------------------------
    def observable(self, fn: object) -> bool:
        """fn is the candidate's own Python code (or Triton's default), so its ops are attributable."""
        if fn is None:
            return True
        if isinstance(fn, functools.partial):
            return self.observable(fn.func)
        if isinstance(fn, types.MethodType):
            return self.observable(fn.__func__)
        code = getattr(fn, "__code__", None) if isinstance(fn, types.FunctionType) else None
        if code is None:
            call = vars(type(fn)).get("__call__")  # a callable object: its class's own __call__
            return isinstance(call, types.FunctionType) and self.observable(call)
        kind = self.attribution.classify(code)
        return kind == CANDIDATE or (
            kind == TRUSTED and code.co_filename not in self.attribution.harness_files
        )

    def check_launch(self, kernel: object, kwargs: dict[str, Any]) -> None:
        hooks: list[tuple[str, object]] = (
            [("grid", kwargs.get("grid"))] if callable(kwargs.get("grid")) else []
        )
        values = getattr(kernel, "values", None)  # Heuristics
        if isinstance(values, dict):
            hooks += [(f"heuristic {k!r}", v) for k, v in values.items()]
        for attr in ("early_config_prune", "perf_model", "_do_bench"):
            hooks.append((attr, getattr(kernel, attr, None)))
        for attr, user in (("pre_hook", "user_defined_pre_hook"), ("post_hook", "user_defined_post_hook")):
            if getattr(kernel, user, False):
                hooks.append((attr, getattr(kernel, attr, None)))
        for config in getattr(kernel, "configs", None) or ():
            hooks.append(("config pre_hook", getattr(config, "pre_hook", None)))
        for what, fn in hooks:
            if fn is not None and not self.observable(fn):
                self.record(
                    "tamper", f"{what} handed to Triton is not the candidate's Python code: {fn!r:.80}"
                )


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
        return self.monitor.handle(func, args, kwargs or {}, sys._getframe(1))


def dispatch_mode(monitor: Monitor) -> TorchDispatchMode:
    return _Mode(monitor)


def _wrap_run(original: Callable[..., Any], monitor: Monitor) -> Callable[..., Any]:
    @functools.wraps(original)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("warmup") or not monitor.window:  # compile-only, or not the candidate's window
            return original(self, *args, **kwargs)
        if monitor._launch_depth == 0:
            monitor.launches += 1
        monitor.check_launch(self, kwargs)
        monitor._launch_depth += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            monitor._launch_depth -= 1

    return run


class LaunchHooks:
    """Class-level wrappers of ``run`` (what ``kernel[grid](...)`` calls); installable and removable."""

    def __init__(self, monitor: Monitor) -> None:
        from triton.runtime.autotuner import Autotuner, Heuristics
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        classes = (JITFunction, InterpretedFunction, Autotuner, Heuristics)
        self.originals: dict[type, Callable[..., Any]] = {
            cls: cls.__dict__["run"] for cls in classes if "run" in cls.__dict__
        }
        self.wrappers = {cls: _wrap_run(orig, monitor) for cls, orig in self.originals.items()}

    def install(self) -> None:
        for cls, wrapper in self.wrappers.items():
            cls.run = wrapper  # type: ignore[attr-defined]

    def uninstall(self) -> None:
        for cls, original in self.originals.items():
            cls.run = original  # type: ignore[attr-defined]
