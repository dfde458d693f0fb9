"""Child-side guards for what a torch op trace cannot see.

- Tensor methods that hand host code the raw data without any aten op (``numpy``, ``__array__``,
  ``tolist``, ``data_ptr``, ``untyped_storage``, ``__dlpack__``, ...) are wrapped: called from the
  candidate's frames they are recorded as host compute.
- The switches that turn dispatch tracing off or peek at it (``torch._C._DisableTorchDispatch``, the
  mode-stack push/pop functions, dispatch-key guards, ``torch.library``) are replaced, wherever a
  loaded module holds them, by tripwires that call through and record a candidate caller.
- One audit hook (``sys.addaudithook``: it cannot be removed) sees ctypes, frame and gc access,
  profile/trace hooks, ``__class__`` assignment, exec/compile, file, process and network calls;
  attributed to the candidate, they are recorded (host compute, tampering, forbidden call).

Everything but the audit hook is removable: blind calls run with all of it taken off again.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch

from orchestrator.verify import runtime_policy as rp
from orchestrator.verify.monitor import Monitor

_MISSING = object()


def _classify_event(event: str) -> tuple[str, bool] | None:
    """(finding kind, direct attribution) for an audit event, or None when it is not evidence."""
    if event in rp.AUDIT_IGNORE:
        return None
    transitive = event.startswith(rp.AUDIT_TRANSITIVE_PREFIXES)
    if event.startswith(rp.AUDIT_TAMPER_PREFIXES):
        return "tamper", not transitive
    if event.startswith(rp.AUDIT_HOST_PREFIXES):
        return "host_compute", not transitive
    if event.startswith(rp.AUDIT_FORBIDDEN_PREFIXES):
        return "forbidden", not transitive
    return None


class AuditHook:
    """The process-wide audit hook; records only inside a window and only for candidate frames."""

    def __init__(self, monitor: Monitor, probe_event: str) -> None:
        self.monitor = monitor
        self.probe_event = probe_event
        self.probes_seen = 0
        self._busy = threading.local()

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if event == self.probe_event:
            self.probes_seen += 1
            return
        if not self.monitor.window or getattr(self._busy, "on", False):
            return
        kind = _classify_event(event)
        if kind is None:
            return
        self._busy.on = True
        try:
            frame = sys._getframe(1)
            if self.monitor.by_candidate(frame, direct=kind[1]):
                detail = event if event != "object.__getattr__" or not args else f"{event} {args[-1]!r:.40}"
                self.monitor.record(kind[0], detail)
        finally:
            self._busy.on = False


class _Patch:
    """One attribute replaced on one owner (module or class), restorable."""

    def __init__(self, owner: object, name: str, replacement: object) -> None:
        self.owner, self.name, self.replacement = owner, name, replacement
        self.original = vars(owner).get(name, _MISSING) if hasattr(owner, "__dict__") else _MISSING

    def install(self) -> None:
        setattr(self.owner, self.name, self.replacement)

    def uninstall(self) -> None:
        if self.original is _MISSING:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self.original)


def _method_guard(monitor: Monitor, label: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def guard(*args: Any, **kwargs: Any) -> Any:
        if monitor.window and monitor.by_candidate(sys._getframe(1)):
            monitor.record("host_compute", label)
        return original(*args, **kwargs)

    return guard


def _tripwire(monitor: Monitor, label: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def tripwire(*args: Any, **kwargs: Any) -> Any:
        if monitor.window and monitor.by_candidate(sys._getframe(1)):
            monitor.record("tamper", label)
        return original(*args, **kwargs)

    tripwire.__name__ = getattr(original, "__name__", label.rsplit(".", 1)[-1])
    tripwire.__qualname__ = getattr(original, "__qualname__", tripwire.__name__)
    tripwire.__doc__ = getattr(original, "__doc__", None)
    return tripwire


class HostGuards:
    """Method guards and tripwires (removable) for one child process."""

    def __init__(self, monitor: Monitor) -> None:
        self.patches: list[_Patch] = []
        for name in rp.HOST_READ_METHODS:
            original = getattr(torch.Tensor, name, None)
            if callable(original):
                self.patches.append(
                    _Patch(torch.Tensor, name, _method_guard(monitor, f"Tensor.{name}", original))
                )
        targets: dict[int, tuple[object, Callable[..., Any]]] = {}
        for module_name, name in rp.TRIPWIRES + rp.HOST_READ_FUNCTIONS:
            module = sys.modules.get(module_name)
            original = getattr(module, name, None) if module is not None else None
            if callable(original) and id(original) not in targets:
                kind = "host_compute" if (module_name, name) in rp.HOST_READ_FUNCTIONS else "tamper"
                wrapper = (_method_guard if kind == "host_compute" else _tripwire)(
                    monitor, f"{module_name}.{name}", original
                )
                targets[id(original)] = (original, wrapper)
        # Replace every module-level reference, not only the canonical one: `from torch._C import
        # _DisableTorchDispatch` in some torch module would otherwise keep the original reachable.
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for key, value in list(namespace.items()):
                hit = targets.get(id(value))
                if hit is not None and hit[0] is value:
                    self.patches.append(_Patch(module, key, hit[1]))

    def install(self) -> None:
        for patch in self.patches:
            patch.install()

    def uninstall(self) -> None:
        for patch in reversed(self.patches):
            patch.uninstall()
