"""Recursion is the stack's observable (`environment_probe`).

A function that recurses until `RecursionError` measures how many frames are left: the harness's
monitored calls run deeper (its dispatch mode, hooks and wrappers sit on the stack) than its blind
call, so the depth tells them apart. No launcher needs recursion, so the gate rejects:

- every function in a cycle of the module's call graph: functions, lambdas, methods and kernels,
  edges by resolved object (aliases, a lambda bound to a name, `functools.reduce(f, ...)`, `map(f,
  ...)`, `yield from f()`: any *reference* to a function, not only a call), a function nested in
  another (the outer one may run it), a class (its `__init__`/`__post_init__`), an attribute named
  like a method of one of the module's classes (`self.go()`, `_P().go`, a property read), and a call
  of a value the gate cannot resolve (a parameter: `f(f, n)`) to every function that escapes as a
  value;
- any reference to `RecursionError`, however it is reached (`_E = RecursionError`, a tuple of
  handlers). A bare `except:` or `except BaseException` around a recursive call needs the recursion,
  which is rejected.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

from orchestrator.verify.static.values import DATA, KernelValue, MemberValue, UserValue

if TYPE_CHECKING:
    from orchestrator.verify.static.gate import Gate

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_OWN_INIT = ("__init__", "__post_init__")
_RECURSION_ERROR = MemberValue("builtins", ("RecursionError",))
_WHY = (
    "recursing until RecursionError measures the stack's remaining depth, which tells the harness's calls"
    " apart"
)


class RecursionRules:
    def __init__(self, gate: Gate) -> None:
        self.g = gate
        self.functions: dict[int, ast.AST] = {
            id(n): n for n in ast.walk(gate.tree) if isinstance(n, _FUNCTIONS)
        }
        self.methods: dict[str, set[int]] = {}  # method name -> ids of the defs (any class)
        self.inits: dict[int, set[int]] = {}  # id(ClassDef) -> ids of its __init__/__post_init__
        for node in ast.walk(gate.tree):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                        self.methods.setdefault(stmt.name, set()).add(id(stmt))
                        if stmt.name in _OWN_INIT:
                            self.inits.setdefault(id(node), set()).add(id(stmt))

    def run(self) -> None:
        for node in ast.walk(self.g.tree):
            self._recursion_error(node)
        escaped = self._escaped()
        edges = {fn: self._edges(node, escaped) for fn, node in self.functions.items()}
        for cycle in _cycles(edges):
            names = " -> ".join(_name(self.functions[f]) for f in cycle)
            for fn in cycle:
                node = self.functions[fn]
                self.g.flag("environment_probe", node, f"{_name(node)} is recursive ({names} -> ...): {_WHY}")

    def _recursion_error(self, node: ast.AST) -> None:
        g = self.g
        if not (isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Load)):
            return
        if g.position(node) != "base" and _RECURSION_ERROR in g.values(node):
            g.flag("environment_probe", node, f"RecursionError (written {ast.unparse(node)[:40]}): {_WHY}")

    # --- the call graph -------------------------------------------------------------------------
    def _targets(self, value: object) -> set[int]:
        """The defs a value stands for (a class stands for its __init__)."""
        if isinstance(value, UserValue):
            if value.node in self.functions:
                return {value.node}
            return set(self.inits.get(value.node, ()))
        if isinstance(value, KernelValue):
            kernel = self.g.kernel_defs.get(value.name)
            return {id(kernel)} if kernel is not None else set()
        return set()

    def _escaped(self) -> set[int]:
        """Functions handed on as values (arguments, containers, returns, a launch's grid)."""
        out: set[int] = set()
        for node in ast.walk(self.g.tree):
            parent = self.g.parents.get(id(node))
            if isinstance(node, ast.Lambda) and not isinstance(parent, ast.Assign | ast.NamedExpr):
                out.add(id(node))
            elif isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Load):
                if isinstance(parent, ast.Call) and parent.func is node:
                    continue
                if isinstance(parent, ast.Subscript) and parent.value is node:
                    continue  # kernel[grid]: launched here, not handed on
                if isinstance(node, ast.Attribute):  # a bound method handed on (`_count(p.go)`)
                    out |= self.methods.get(node.attr, set()) if DATA in self.g.values(node.value) else set()
                    continue
                for value in self.g.values(node):
                    out |= self._targets(value)
        return out

    def _edges(self, fn: ast.AST, escaped: set[int]) -> set[int]:
        out: set[int] = set()
        for node in _own_nodes(fn):
            if isinstance(node, _FUNCTIONS):
                out.add(id(node))  # a nested function: the outer one may run it
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                for value in self.g.values(node):
                    out |= self._targets(value)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                if node.attr in self.methods and DATA in self.g.values(node.value):
                    out |= self.methods[node.attr]
            if isinstance(node, ast.Call) and _unresolved_callee(self.g, node.func):
                out |= escaped
        return out


def _unresolved_callee(gate: Gate, func: ast.AST) -> bool:
    """A call of something the gate cannot name: a parameter, an item, a call's result."""
    if isinstance(func, ast.Name):
        return DATA in gate.values(func)
    return isinstance(func, ast.Subscript | ast.Call) and DATA in gate.values(func)


def _own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """The nodes a function's body runs itself (nested functions are yielded, not entered)."""
    body = [fn.body] if isinstance(fn, ast.Lambda) else list(fn.body)  # type: ignore[attr-defined]
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _name(node: ast.AST) -> str:
    return "<lambda>" if isinstance(node, ast.Lambda) else getattr(node, "name", "?")


def _cycles(edges: dict[int, set[int]]) -> list[list[int]]:
    """Strongly connected components that hold a cycle (Tarjan's, iterative: no recursion here)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    found: list[list[int]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work: list[tuple[int, Iterator[int]]] = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges.get(node, ()):
                    found.append(component[::-1])
    return found
