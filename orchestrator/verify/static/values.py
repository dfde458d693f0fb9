"""What a name in a candidate can stand for, and one attribute step on the real objects.

A value is a module, a member reached from a module (a canonical dotted path such as ``os.popen``),
one of the candidate's kernels or functions, plain data, or unresolved. Steps are taken on the real
modules, which the harness' parent imports anyway (``os.path.os`` is the os module, ``typing.sys`` is
sys), reading only module ``__dict__`` entries and static class attributes: no ``__getattr__`` and no
descriptor runs, so resolving never executes code a candidate chose.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass
from types import ModuleType

from orchestrator.verify.static.policy import MODULE_DISPLAY

MAX_CHAIN = 12  # attribute steps below a module before a chain counts as unresolved


@dataclass(frozen=True)
class ModuleValue:
    name: str  # canonical module name (module.__name__)

    @property
    def display(self) -> str:
        return MODULE_DISPLAY.get(self.name, self.name)


@dataclass(frozen=True)
class MemberValue:
    module: str  # canonical name of the last module on the chain
    attrs: tuple[str, ...]

    @property
    def display(self) -> str:
        return ".".join((MODULE_DISPLAY.get(self.module, self.module), *self.attrs))


@dataclass(frozen=True)
class KernelValue:
    name: str


@dataclass(frozen=True)
class UserValue:
    """A function, lambda or class the candidate defines."""

    node: int  # id() of the defining node
    name: str


@dataclass(frozen=True)
class DataValue:
    pass


@dataclass(frozen=True)
class UnresolvedValue:
    reason: str


Value = ModuleValue | MemberValue | KernelValue | UserValue | DataValue | UnresolvedValue
DATA = DataValue()
_MISSING = object()


def real_member(module: str, attrs: tuple[str, ...]) -> object:
    """The object a member path names in this process, or _MISSING (never runs __getattr__)."""
    obj: object = sys.modules.get(module, _MISSING)
    for attr in attrs:
        if obj is _MISSING:
            return _MISSING
        obj = _static_attr(obj, attr)
    return obj


def _static_attr(obj: object, attr: str) -> object:
    if isinstance(obj, ModuleType):
        return obj.__dict__.get(attr, _MISSING)
    try:
        return inspect.getattr_static(obj, attr)
    except AttributeError:
        return _MISSING


def missing(obj: object) -> bool:
    return obj is _MISSING


def step(value: Value, attr: str) -> Value:
    """The value of `value.attr`."""
    if isinstance(value, ModuleValue):
        module = sys.modules.get(value.name)
        found = module.__dict__.get(attr, _MISSING) if module is not None else _MISSING
        if isinstance(found, ModuleType):
            return ModuleValue(found.__name__)
        sub = _submodule(value.name, attr) if found is _MISSING else None
        if sub is not None:
            return ModuleValue(sub.__name__)
        return MemberValue(value.name, (attr,))
    if isinstance(value, MemberValue):
        if len(value.attrs) >= MAX_CHAIN:
            return UnresolvedValue(f"attribute chain {value.display} is too long to resolve")
        obj = real_member(value.module, value.attrs)
        if obj is not _MISSING:
            found = _static_attr(obj, attr)
            if isinstance(found, ModuleType):
                return ModuleValue(found.__name__)
        return MemberValue(value.module, (*value.attrs, attr))
    if isinstance(value, UnresolvedValue):
        return value
    return DATA


def module_value(dotted: str) -> Value:
    """The module an `import dotted` names (the real one when it is loaded here)."""
    loaded = sys.modules.get(dotted)
    if loaded is not None:
        return ModuleValue(loaded.__name__)
    head, _, leaf = dotted.rpartition(".")
    return step(module_value(head), leaf) if head else ModuleValue(dotted)


# Submodules the gate imports itself to resolve names in them: Triton's language (kernel code may
# use all of it, so what its lazily loaded parts contain must be known, e.g. extra.libdevice).
_LOADABLE = ("triton.language.",)


def _submodule(parent: str, attr: str) -> ModuleType | None:
    dotted = f"{parent}.{attr}"
    found = sys.modules.get(dotted)
    if found is None and dotted.startswith(_LOADABLE) and attr.isidentifier() and not attr.startswith("_"):
        try:
            found = importlib.import_module(dotted)
        except Exception:  # not a module (or a broken one): the name stays an unresolved member
            found = None
    return found
