"""Launches, launch callables and the entry: which code runs inside a launch (grid callables,
decorator arguments), whether the entry is one checked function that launches a kernel, and no
fallback around a launch.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from orchestrator.verify.static import policy as sp
from orchestrator.verify.static.values import KernelValue, MemberValue, UserValue

if TYPE_CHECKING:
    from orchestrator.verify.static.gate import Gate

_CALLABLES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def definition(gate: Gate, value: UserValue) -> ast.AST | None:
    scope = gate.resolver.scope_for_node.get(value.node)
    return scope.node if scope is not None else None


def launch_kernel(gate: Gate, call: ast.AST) -> str | None:
    """The kernel a `kernel[grid](...)` call launches (every value of `kernel` must be that kernel)."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Subscript)):
        return None
    values = gate.values(call.func.value)
    names = {v.name for v in values if isinstance(v, KernelValue)}
    return names.pop() if len(names) == 1 and len(values) == 1 else None


def launch_callables(gate: Gate, pointers: dict[str, frozenset[str]]) -> dict[int, frozenset[str]]:
    """Functions and lambdas Triton calls during a launch, with the launched kernel's pointer params."""
    found: dict[int, frozenset[str]] = {}

    def collect(expr: ast.AST, kernel: str, depth: int) -> None:
        for node in ast.walk(expr):
            if isinstance(node, ast.Lambda):
                found[id(node)] = pointers[kernel]
            elif isinstance(node, ast.Name):
                for value in gate.values(node):
                    target = definition(gate, value) if isinstance(value, UserValue) else None
                    if isinstance(target, _CALLABLES) and id(target) not in found:
                        found[id(target)] = pointers[kernel]
                        if depth and not isinstance(target, ast.Lambda):  # e.g. a function making configs
                            for stmt in target.body:
                                collect(stmt, kernel, depth - 1)
                if depth:
                    for source, _ in gate.resolver.module_scope.bindings.get(node.id, []):
                        if isinstance(source, ast.AST) and not isinstance(source, _CALLABLES):
                            collect(source, kernel, depth - 1)

    for name, kernel in gate.kernel_defs.items():
        for decorator in kernel.decorator_list:
            if isinstance(decorator, ast.Call):
                for arg in (*decorator.args, *(k.value for k in decorator.keywords)):
                    collect(arg, name, 3)
    every_pointer = frozenset().union(*pointers.values())
    for node in ast.walk(gate.tree):
        kernel_name = launch_kernel(gate, node)
        if kernel_name is not None:
            collect(node.func.slice, kernel_name, 3)  # type: ignore[attr-defined]
        if isinstance(node, ast.Call) and any(
            isinstance(v, MemberValue) and v.display == "triton.Config" for v in gate.values(node.func)
        ):  # a Config's hooks run in whichever launch uses it
            pointers.setdefault("", every_pointer)
            for keyword in node.keywords:
                collect(keyword.value, "", 3)
    return found


class EntryRules:
    def __init__(self, gate: Gate) -> None:
        self.g = gate
        self.module = gate.resolver.module_scope

    def run(self) -> None:
        g = self.g
        if not g.kernel_defs:
            g.flag("no_triton_kernel", g.tree, "no @triton.jit function is defined")
        self._rebinding()
        launching = self._launching()
        entry = self._entry()
        if entry is not None and g.kernel_defs and id(entry) not in launching:
            g.flag("no_kernel_launch", entry, f"{g.entry} never launches a kernel[grid](...)")
        for node in ast.walk(g.tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self._cache(node, entry, launching)
            if isinstance(node, ast.Try | ast.TryStar) and not g.in_kernel(node):
                guarded = [n for stmt in node.body for n in ast.walk(stmt)]
                if any(self._launches(n, launching) for n in guarded):
                    g.flag("try_except_fallback", node, "kernel launch inside try/except")

    def _entry(self) -> ast.FunctionDef | None:
        g = self.g
        bindings = self.module.bindings.get(g.entry, [])
        values = g.resolver.values.get((id(self.module), g.entry), frozenset())
        defs = [definition(g, v) for v in values if isinstance(v, UserValue)]
        if not bindings or len(values) != 1 or not isinstance(defs[0] if defs else None, ast.FunctionDef):
            g.flag("missing_entry", g.tree, f"entry function {g.entry!r} is not defined")
            return None
        entry = defs[0]
        assert isinstance(entry, ast.FunctionDef)
        if not isinstance(g.parents.get(id(entry)), ast.Module):
            g.flag("missing_entry", g.tree, f"entry function {g.entry!r} is not defined at module level")
            return None
        return entry

    def _rebinding(self) -> None:
        """A checked definition (the entry, a kernel, any module-level def) is bound exactly once."""
        g = self.g
        for name, sources in self.module.bindings.items():
            values = g.resolver.values.get((id(self.module), name), frozenset())
            checked = name == g.entry or any(isinstance(v, UserValue | KernelValue) for v in values)
            if checked and len(sources) > 1:
                g.flag(
                    "dynamic_name",
                    g.tree,
                    f"{name} is bound {len(sources)} times: the gate checks one definition, Python runs"
                    " the last",
                )

    def _launches(self, node: ast.AST, launching: set[int]) -> bool:
        if launch_kernel(self.g, node) is not None:
            return True
        if not isinstance(node, ast.Call):
            return False
        return any(
            isinstance(v, UserValue) and id(definition(self.g, v)) in launching
            for v in self.g.values(node.func)
        )

    def _launching(self) -> set[int]:
        """ids of the candidate's functions that launch a kernel, directly or through others."""
        g = self.g
        functions = [n for n in ast.walk(g.tree) if isinstance(n, _CALLABLES) and not self._is_kernel(n)]
        calls: dict[int, set[int]] = {}
        launching: set[int] = set()
        for fn in functions:
            nodes = list(ast.walk(fn))
            if any(launch_kernel(g, n) is not None for n in nodes):
                launching.add(id(fn))
            calls[id(fn)] = {
                id(definition(g, v))
                for n in nodes
                if isinstance(n, ast.Call)
                for v in g.values(n.func)
                if isinstance(v, UserValue)
            }
        changed = True
        while changed:
            changed = False
            for fn_id, called in calls.items():
                if fn_id not in launching and called & launching:
                    launching.add(fn_id)
                    changed = True
        return launching

    def _is_kernel(self, node: ast.AST) -> bool:
        return any(node is k for k in self.g.kernel_defs.values())

    def _cache(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef, entry: ast.AST | None, launching: set[int]
    ) -> None:
        if node is not entry and id(node) not in launching:
            return
        for decorator in node.decorator_list:
            if self.g.decorator_targets(decorator, self.g.resolver) & sp.CACHE_DECORATORS:
                self.g.flag(
                    "decorator", decorator, f"a cache on {node.name}: outputs would be reused across calls"
                )
