"""Device-conditioned host code (`device_conditioned`).

The cpu pool runs a candidate on CPU tensors under the Triton interpreter; a launcher that asks which
device it runs on can send the cpu pool down a correct, slow path and the device down another one the
harness never sees. So, in host code and kernels alike:

- a resolved object in a device namespace (`torch.cuda.is_available`, `torch.npu.*`,
  `torch.version.cuda`, `torch.backends.*`, `torch.accelerator`, `triton.language.target_info`, ...),
  however it is reached (aliases, `getattr`, `hasattr(torch, "npu")` probes, another module's
  re-export: decided by the object), unless the task permits it by name (`DEVICE_QUERIES`);
- a tensor's device predicates (`is_cuda`, `is_cpu`, ..., `get_device()`) and `.type` on any object;
- a device value (`x.device`, `torch.device(...)`, a variable or parameter holding one, a function
  returning one) compared, formatted, converted, used as a key or index, matched on, read for
  `.type`/`.index`, or passed to anything but an allocator or the candidate's own functions.

Passing `device=x.device` along to an allocator stays fine: that is what the launcher is for.
"""

from __future__ import annotations

import ast
import functools
import sys
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING

from orchestrator.verify import policy
from orchestrator.verify.static import policy as sp
from orchestrator.verify.static.names import Scope
from orchestrator.verify.static.targets import is_object
from orchestrator.verify.static.values import (
    DATA,
    MemberValue,
    ModuleValue,
    UserValue,
    Value,
    missing,
    real_member,
    step,
)

if TYPE_CHECKING:
    from orchestrator.verify.static.gate import Gate

Var = tuple[int, str]
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_WHY = "the cpu pool only ever runs the cpu side of it"


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p + ".") for p in prefixes)


@functools.cache
def _device_objects() -> dict[int, str]:
    """id() of every object defined in a loaded device namespace (so a re-export elsewhere is the
    same query), keyed to its path there. Only objects whose own ``__module__`` is in the namespace:
    `torch.cuda` also holds `typing.Optional`, which is nobody's device query."""
    out: dict[int, str] = {}
    for name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or not _under(name, policy.DEVICE_NAMESPACES):
            continue
        for attr, obj in list(vars(module).items()):
            home = getattr(obj, "__module__", None)
            if attr.startswith("_") or not isinstance(home, str):
                continue
            if callable(obj) and _under(home, policy.DEVICE_NAMESPACES):
                out.setdefault(id(obj), f"{name}.{attr}")
    return out


def device_target(value: Value) -> str | None:
    """The device query `value` is (its path), or None."""
    if not isinstance(value, ModuleValue | MemberValue):
        return None
    path = value.display
    if _under(path, policy.DEVICE_NAMESPACES):
        return path
    if isinstance(value, MemberValue):
        if value.display.startswith("torch.Tensor.") and value.attrs[-1] in (
            sp.DEVICE_PREDICATES | sp.DEVICE_ATTRS | {"device"}
        ):
            return path
        obj = real_member(value.module, value.attrs)
        if not missing(obj) and not isinstance(obj, int | float | str | bool | type(None)):
            return _device_objects().get(id(obj))
    return None


class DeviceRules:
    def __init__(self, gate: Gate, permitted: tuple[str, ...]) -> None:
        self.g = gate
        self.r = gate.resolver
        self.permitted = permitted
        self.devices: set[Var] = set()  # variables that may hold a device
        self.returning: set[int] = set()  # ids of the candidate's functions that may return one

    def flag(self, node: ast.AST, message: str) -> None:
        self.g.flag("device_conditioned", node, f"{message}: {_WHY}")

    def run(self) -> None:
        for node in ast.walk(self.g.tree):
            self._resolved(node)
        host = [n for n in ast.walk(self.g.tree) if not self.g.in_kernel(n)]
        for _ in range(8):
            if not self._propagate(host):
                break
        for node in host:
            self._check(node)

    # --- resolved objects -----------------------------------------------------------------------
    def _allowed(self, value: Value, path: str) -> bool:
        if path in self.permitted:
            return True
        return isinstance(value, MemberValue) and any(is_object(value, p) for p in self.permitted)

    def _resolved(self, node: ast.AST) -> None:
        g = self.g
        values: frozenset[Value] = frozenset()
        if isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Load):
            if g.position(node) != "base":
                values = g.values(node)
        elif id(node) in g.lookups:
            assert isinstance(node, ast.Call)
            name = node.args[1].value  # type: ignore[attr-defined]
            values = frozenset(step(v, name) for v in g.values(node.args[0]))  # hasattr too
        for value in values:
            path = device_target(value)
            if path is not None and not self._allowed(value, path):
                written = ast.unparse(node)[:60]
                seen = "" if written == path else f" (written {written})"
                self.flag(node, f"{path}{seen} tells which device the code runs on")

    # --- device values --------------------------------------------------------------------------
    def _scope(self, node: ast.AST) -> Scope:
        return self.r.scope_of.get(id(node), self.r.module_scope)

    def _var(self, name: str, scope: Scope) -> Var | None:
        owner = self.r.defining_scope(name, scope)
        return (id(owner), name) if owner is not None else None

    def _plain(self, node: ast.AST) -> bool:
        """Not (only) a module or a member of one: a value of the candidate's own."""
        values = self.g.values(node)
        return not values or DATA in values or any(isinstance(v, UserValue) for v in values)

    def _is_sink(self, call: ast.Call) -> bool:
        func = call.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in sp.DEVICE_SINK_METHODS
            and self._plain(func.value)
        ):
            return True
        values = self.g.values(func)
        return bool(values) and all(
            isinstance(v, UserValue) or (isinstance(v, MemberValue) and v.display in sp.DEVICE_SINKS)
            for v in values
        )

    def _source(self, node: ast.AST) -> bool:
        """node itself yields a device."""
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            return node.attr == "device" and self._plain(node.value)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            return self._var(node.id, self._scope(node)) in self.devices
        if isinstance(node, ast.Call):
            if id(node) in self.g.lookups and node.args[1].value == "device":  # type: ignore[attr-defined]
                return True
            values = self.g.values(node.func)
            if any(isinstance(v, MemberValue) and is_object(v, "torch.device") for v in values):
                return True
            return any(isinstance(v, UserValue) and v.node in self.returning for v in values)
        return False

    def holds_device(self, node: ast.AST) -> bool:
        """node is, or contains, a device (not looking into the tensors an allocator makes of one)."""
        return any(self._source(n) for n in _pruned_walk(node, self._is_sink))

    def _propagate(self, host: list[ast.AST]) -> bool:
        before = (len(self.devices), len(self.returning))
        for scope in self.r._all_scopes():
            for name, sources in scope.bindings.items():
                if any(isinstance(s, ast.AST) and self.holds_device(s) for s, _ in sources):
                    self.devices.add((id(self.r.owner(scope, name)), name))
        for node in host:
            if isinstance(node, ast.Call) and not self._lookup(node):
                self._seed_callees(node)
            elif isinstance(node, ast.Return) and node.value is not None and self.holds_device(node.value):
                owner = self._scope(node).node
                if isinstance(owner, _FUNCTIONS):
                    self.returning.add(id(owner))
            elif isinstance(node, ast.Lambda) and self.holds_device(node.body):
                self.returning.add(id(node))
        return before != (len(self.devices), len(self.returning))

    def _lookup(self, node: ast.Call) -> bool:
        return id(node) in self.g.lookups

    def _seed_callees(self, call: ast.Call) -> None:
        for value in self.g.values(call.func):
            inner = self.r.scope_for_node.get(value.node) if isinstance(value, UserValue) else None
            definition = inner.node if inner is not None else None
            if inner is None or not isinstance(definition, _FUNCTIONS):
                continue
            args = definition.args
            params = [a.arg for a in (*args.posonlyargs, *args.args)]
            pairs = list(zip(params, call.args, strict=False))
            pairs += [(k.arg, k.value) for k in call.keywords if k.arg]
            for param, arg in pairs:
                if self.holds_device(arg):
                    self.devices.add((id(inner), param))
            extra = [a.arg for a in (args.vararg, args.kwarg) if a is not None]
            spread = [a for a in call.args[len(params) :]] + [k.value for k in call.keywords if not k.arg]
            if extra and any(self.holds_device(a) for a in spread):
                self.devices.update((id(inner), p) for p in extra)

    # --- uses -----------------------------------------------------------------------------------
    def _check(self, node: ast.AST) -> None:
        text = ast.unparse(node)[:60]
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            self._attribute(node.attr, node, node.value)
        elif isinstance(node, ast.Call):
            if self._lookup(node):
                self._attribute(node.args[1].value, node, node.args[0])  # type: ignore[attr-defined]
            elif not self._is_sink(node):
                args = [*node.args, *(k.value for k in node.keywords)]
                if any(self.holds_device(a) for a in args):
                    self.flag(node, f"a device passed to {ast.unparse(node.func)[:40]}")
        elif isinstance(node, ast.Compare) and not _is_none_test(node):
            if any(self.holds_device(o) for o in (node.left, *node.comparators)):
                self.flag(node, f"a device compared: {text}")
        elif isinstance(node, ast.FormattedValue) and self.holds_device(node.value):
            self.flag(node, "a device formatted into a string")
        elif isinstance(node, ast.BinOp) and (self.holds_device(node.left) or self.holds_device(node.right)):
            self.flag(node, f"a device formatted or computed with: {text}")
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if self.holds_device(node.slice):
                self.flag(node, f"a device used as a key or index: {text}")
        elif isinstance(node, ast.Match) and self.holds_device(node.subject):
            self.flag(node, "match on a device")
        elif isinstance(node, ast.MatchClass):
            for attr in node.kwd_attrs:
                if attr in sp.DEVICE_ATTRS or attr in sp.DEVICE_PREDICATES:
                    self.flag(node, f"a match pattern reading .{attr}")

    def _attribute(self, attr: str, node: ast.AST, base: ast.AST) -> None:
        if not self._plain(base):
            return  # a chain through a module: judged by its resolved object above
        if attr in sp.DEVICE_PREDICATES:
            self.flag(node, f".{attr} tells which device a tensor is on")
        elif attr == "type" and not (isinstance(base, ast.Name) and base.id in ("self", "cls")):
            self.flag(node, ".type names a device (or a tensor's device type)")
        elif attr in sp.DEVICE_ATTRS and self.holds_device(base):
            self.flag(node, f"a device's .{attr}")


def _is_none_test(node: ast.Compare) -> bool:
    """`d is None` / `d is not None`: whether a device was given, not which one."""
    operands = (node.left, *node.comparators)
    return all(isinstance(o, ast.Is | ast.IsNot) for o in node.ops) and any(
        isinstance(o, ast.Constant) and o.value is None for o in operands
    )


def _pruned_walk(node: ast.AST, prune: object) -> Iterator[ast.AST]:
    """ast.walk that does not enter sink calls (their results are tensors) or nested functions."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if isinstance(current, ast.Call) and prune(current):  # type: ignore[operator]
            continue
        if isinstance(current, _FUNCTIONS) and current is not node:
            continue
        stack.extend(ast.iter_child_nodes(current))
