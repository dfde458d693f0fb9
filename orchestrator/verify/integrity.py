"""After every monitored window: is the monitor still the one that was installed? Fail closed if not.

A baseline is taken once everything is installed and before the candidate is imported; each check
compares the live process against it:

- ``sys.modules``: every module still the same object, and every binding in every module's namespace
  still the same object (a patched ``torch.save``, a widened allow-list, a replaced tripwire, an
  unwrapped ``Tensor.numpy``); the only change tolerated is a package attribute set to its freshly
  imported submodule (Triton and torch import lazily);
- the class namespaces the harness relies on (``torch.Tensor``, the dispatch mode, Triton's launch
  and interpreter classes), new keys included (a ``__torch_function__`` added to ``torch.Tensor``);
- the dispatch state: exactly our mode on the dispatch stack, no function mode, torch-function
  handling on, dispatch-key TLS as it was;
- ``sys.gettrace``/``sys.getprofile``, signal handlers, atexit callbacks, import hooks, gc callbacks;
  and that the audit hook still sees a per-job random probe event.

A module whose namespace dict has not changed since the last check is not compared again: CPython
bumps a dict's version tag (PEP 509) on every change to it, and that tag, read in place, says so
(``dict_version``). Where the interpreter has no tag we can trust, every check compares every binding.

Threads are not counted here (a device runtime starts its own): starting one from candidate code is
caught when it happens, by the tripwire on ``_thread.start_new_thread`` (hostguards.py).
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import operator
import signal
import sys
import sysconfig
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any

import torch

_MISSING = object()
# Plain data (flags, counters, names) in library modules changes as they run; behaviour lives in
# functions, classes, modules and containers, which is what a patch has to replace.
_DATA = (bool, int, float, complex, str, bytes, type(None))
# The Triton interpreter patches triton.language on every launch and, for @jit helpers called from a
# kernel (tl.sum, tl.max, ...), never restores it: that churn is Triton's. What a kernel computes
# there is judged by its results, and candidate code patched in shows up as candidate frames.
_CHURNING_PREFIXES = ("triton.language",)
# Dunder names the runtime itself adds to modules (the warnings machinery's per-module registry).
_RUNTIME_DUNDERS = frozenset({"__warningregistry__"})
# Captured before any candidate code runs (and before the tripwires replace them); the builtins too,
# as names of this module (which the candidate cannot reach): a patched ``builtins.all`` or ``len``
# would otherwise answer the very comparisons that look for patches.
_len, _all, _map, _is, _isinstance, _type = len, all, map, operator.is_, isinstance, type
_vars, _dict, _list, _getattr, _str = vars, dict, list, getattr, str
_LEN_DISPATCH = torch._C._len_torch_dispatch_stack
_DISPATCH_AT = torch._C._get_dispatch_stack_at
_LEN_FUNCTION = torch._C._len_torch_function_stack
_FUNCTION_ENABLED = torch._C._is_torch_function_enabled
_FUNCTION_ALL_DISABLED = torch._C._is_torch_function_all_disabled
_TLS_EXCLUDE = torch._C._dispatch_tls_local_exclude_set
_TLS_INCLUDE = torch._C._dispatch_tls_local_include_set


def _version_reader() -> Callable[[dict[str, Any]], int] | None:
    """A reader of a dict's version tag (``ma_version_tag``, after the object header and ``ma_used``),
    or None where the layout is not that, or the tag does not move exactly when the dict changes."""
    if sys.implementation.name != "cpython" or not (3, 11) <= sys.version_info[:2] <= (3, 13):
        return None
    if sysconfig.get_config_var("Py_GIL_DISABLED"):  # another object header
        return None
    offset = object.__basicsize__ + ctypes.sizeof(ctypes.c_ssize_t)
    at = ctypes.c_uint64.from_address
    # The getter of ctypes' own (immutable) base type, not ``c_uint64.value``: a candidate can put a
    # property of its own on ``c_uint64`` (a plain class) that answers the snapshot's versions forever.
    value = vars(ctypes._SimpleCData)["value"].__get__

    def version(d: dict[str, Any], _id: Callable[[object], int] = id) -> int:
        return value(at(_id(d) + offset))

    probe: dict[str, Any] = {"a": object()}
    seen = [version(probe), version(probe)]
    probe["a"] = object()  # a rebinding, the size unchanged
    seen.append(version(probe))
    del probe["a"]
    seen.append(version(probe))
    probe["a"] = probe
    seen.append(version(probe))
    if seen[0] != seen[1] or len(set(seen[1:])) != 4:
        return None
    return version


# Captured before any candidate code runs, as the functions above are.
dict_version = _version_reader()


def _signals() -> dict[int, object]:
    out: dict[int, object] = {}
    for sig in signal.valid_signals():
        try:
            out[int(sig)] = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
    return out


class Integrity:
    def __init__(
        self,
        namespaces: Mapping[str, dict[str, Any]],
        classes: Iterable[type],
        probe: Callable[[], bool],
    ) -> None:
        self.extra = _dict(namespaces)  # the harness's own modules: not in sys.modules
        self.classes = _list(classes)
        self.probe = probe
        self.ignore: set[str] = set()

    def snapshot(self) -> None:
        self.modules = {
            name: (mod, _dict(_vars(mod)))
            for name, mod in _list(sys.modules.items())
            if _isinstance(_getattr(mod, "__dict__", None), _dict)
        }
        # Per module: its namespace dict and that dict's version when it last matched the baseline.
        # Only real modules (whose dict can never be swapped for another) skip a comparison this way.
        self.versions: dict[str, tuple[dict[str, Any], int]] = {}
        if dict_version is not None:
            for name, (mod, _) in self.modules.items():
                if _isinstance(mod, ModuleType) and _type(ns := _vars(mod)) is _dict:
                    self.versions[name] = (ns, dict_version(ns))
        self.compared = 0  # namespaces compared binding by binding (the rest were unchanged)
        self.namespaces = {name: _dict(ns) for name, ns in self.extra.items()}
        self.class_dicts = {cls: _dict(_vars(cls)) for cls in self.classes}
        self.trace, self.profile = sys.gettrace(), sys.getprofile()
        self.signal_handlers = _signals()
        self.atexit_count = atexit._ncallbacks()
        self.meta_path, self.path_hooks = _list(sys.meta_path), _list(sys.path_hooks)
        self.gc_callbacks = _list(gc.callbacks)
        self.tls = (repr(_TLS_EXCLUDE()), repr(_TLS_INCLUDE()))

    def check(self, mode: object | None) -> list[str]:
        problems: list[str] = []
        self._modules(problems)
        for name, before in self.namespaces.items():
            self._namespace(name, self.extra[name], before, problems, allow_new=True)
        for cls, before in self.class_dicts.items():
            self._namespace(cls.__qualname__, _vars(cls), before, problems, allow_new=False)
        if mode is not None and not (_LEN_DISPATCH() == 1 and _DISPATCH_AT(0) is mode):
            problems.append("the dispatch mode stack is not the monitor's")
        if mode is None and _LEN_DISPATCH() != 0:
            problems.append("a dispatch mode was left on the stack")
        if _LEN_FUNCTION() != 0 or not _FUNCTION_ENABLED() or _FUNCTION_ALL_DISABLED():
            problems.append("torch function handling was changed (a mode pushed or it was disabled)")
        if (repr(_TLS_EXCLUDE()), repr(_TLS_INCLUDE())) != self.tls:
            problems.append("dispatch keys were excluded or included (dispatch-key guard left behind)")
        if sys.gettrace() is not self.trace or sys.getprofile() is not self.profile:
            problems.append("a trace or profile hook was installed (sys.settrace/setprofile)")
        if _signals() != self.signal_handlers:
            problems.append("a signal handler was installed")
        if atexit._ncallbacks() != self.atexit_count:
            problems.append("an atexit handler was registered")
        if _list(sys.meta_path) != self.meta_path or _list(sys.path_hooks) != self.path_hooks:
            problems.append("import hooks were changed")
        if _list(gc.callbacks) != self.gc_callbacks:
            problems.append("a gc callback was registered")
        try:
            alive = self.probe()
        except Exception:
            alive = False
        if not alive:
            problems.append("the audit hook no longer sees events")
        return problems

    def _modules(self, problems: list[str]) -> None:
        for name, (mod, before) in self.modules.items():
            if name in self.ignore or name.startswith(_CHURNING_PREFIXES):
                continue
            if sys.modules.get(name) is not mod:
                problems.append(f"sys.modules[{name!r}] was replaced or removed")
                continue
            ns = _vars(mod)
            version = self._version(name, ns)
            if version is not None and version == self.versions[name][1]:
                continue  # not changed since it last matched
            found = _len(problems)
            self.compared += 1
            self._namespace(name, ns, before, problems, allow_new=True, package=name, skip_data=True)
            if version is not None and _len(problems) == found:
                self.versions[name] = (ns, version)  # matches as it is now: skipped until it changes

    def _version(self, name: str, ns: dict[str, Any]) -> int | None:
        """The version of a module's namespace dict, if it is the one the snapshot saw."""
        known = self.versions.get(name)
        if known is None or known[0] is not ns or dict_version is None:
            return None
        return dict_version(ns)

    @staticmethod
    def _namespace(
        label: str,
        now: Mapping[str, Any],
        before: Mapping[str, Any],
        problems: list[str],
        *,
        allow_new: bool,
        package: str | None = None,
        skip_data: bool = False,
    ) -> None:
        # Fast path, identity only and all in C (no __eq__/__hash__ of anything found there is run):
        # nothing was rebound, added or removed.
        if (
            _len(now) == _len(before)
            and _all(_map(_is, now.keys(), before.keys()))
            and _all(_map(_is, now.values(), before.values()))
        ):
            return
        for key, value in before.items():
            current = now.get(key, _MISSING)
            if current is value or (skip_data and _isinstance(value, _DATA) and _isinstance(current, _DATA)):
                continue
            if (
                package
                and _isinstance(current, ModuleType)
                and sys.modules.get(f"{package}.{key}") is current
            ):
                continue  # a lazily imported submodule bound on its package
            problems.append(f"{label}.{key} was {'deleted' if current is _MISSING else 'rebound'}")
        for key in _list(now.keys()):
            if _type(key) is not _str:  # never hash an object the candidate may have planted
                problems.append(f"{label} got a non-string key")
                continue
            if key in before or key in _RUNTIME_DUNDERS:
                continue
            if not allow_new or (key.startswith("__") and key.endswith("__")):
                problems.append(f"{label}.{key} was added")
