"""Name resolution for the static gate: which object does each name and attribute chain reach?

Every binding of the candidate (imports, assignments and tuple unpacking, walrus, defaults of
functions and lambdas, `global`/`nonlocal`, loop and `with` targets, ...) is collected per scope, and
the value set of every name is computed flow-insensitively (the union over all its bindings, to a
fixpoint). Values and attribute steps are in ``values``; deciding what is allowed is not done
here (``targets``).
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator
from dataclasses import dataclass, field

from orchestrator.verify.static.values import (
    DATA,
    KernelValue,
    MemberValue,
    UnresolvedValue,
    UserValue,
    Value,
    module_value,
    step,
)

MAX_ROUNDS = 24  # fixpoint rounds before still-changing names count as unresolved


# --- scopes ---------------------------------------------------------------------------------------
@dataclass(eq=False)
class Scope:
    node: ast.AST
    kind: str  # module | function | class | comprehension
    parent: Scope | None
    bindings: dict[str, list[tuple[ast.AST | Value, Scope]]] = field(default_factory=dict)
    declared_global: set[str] = field(default_factory=set)
    declared_nonlocal: set[str] = field(default_factory=set)

    def bind(self, name: str, source: ast.AST | Value, where: Scope) -> None:
        self.bindings.setdefault(name, []).append((source, where))


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


class Resolver:
    """Scopes, bindings and the fixpoint of every name's value set for one module."""

    def __init__(self, tree: ast.Module, kernels: frozenset[str]) -> None:
        self.tree = tree
        self.kernels = kernels
        self.module_scope = Scope(tree, "module", None)
        self.scope_of: dict[int, Scope] = {}  # id(expression or statement) -> the scope evaluating it
        self.scope_for_node: dict[int, Scope] = {}  # id(function/class/comprehension node) -> its own scope
        self.tracked: set[int] = set()  # expressions whose value only feeds a resolved binding
        self.values: dict[tuple[int, str], frozenset[Value]] = {}
        self.unstable: set[tuple[int, str]] = set()
        self._memo: dict[int, frozenset[Value]] | None = None  # filled once the fixpoint is reached
        self._collect(tree, self.module_scope)
        self._solve()
        self._memo = {}

    # --- collection -----------------------------------------------------------------------------
    def _target_scope(self, name: str, scope: Scope) -> Scope:
        # `global` bindings live in the module scope; `nonlocal` ones are redirected when solving.
        return self.module_scope if name in scope.declared_global else scope

    def _bind_target(
        self, target: ast.AST, value: ast.AST | Value, scope: Scope, *, walrus: bool = False
    ) -> None:
        where = scope
        if walrus:
            while where.kind == "comprehension" and where.parent is not None:
                where = where.parent
        if isinstance(target, ast.Name):
            owner = self._target_scope(target.id, where)
            owner.bind(target.id, value, scope)
            if isinstance(value, ast.AST) and where.kind != "class":  # class attributes are not resolved
                self.tracked.add(id(value))
        elif isinstance(target, ast.Tuple | ast.List):
            elements = value.elts if isinstance(value, ast.Tuple | ast.List) else None
            pairwise = (
                elements is not None
                and len(elements) == len(target.elts)
                and not any(isinstance(e, ast.Starred) for e in (*elements, *target.elts))
            )
            if pairwise and isinstance(value, ast.AST):
                if where.kind != "class":
                    self.tracked.add(id(value))
                for sub_target, sub_value in zip(target.elts, elements or [], strict=True):
                    self._bind_target(sub_target, sub_value, scope)
            else:
                for sub_target in target.elts:
                    self._bind_target(sub_target, DATA, scope)
        elif isinstance(target, ast.Starred):
            self._bind_target(target.value, DATA, scope)
        # Attribute / Subscript targets store into an object: no name is bound.

    def _declare(self, body: list[ast.stmt], scope: Scope) -> None:
        for node in _walk_scope_local(body):
            if isinstance(node, ast.Global):
                scope.declared_global.update(node.names)
            elif isinstance(node, ast.Nonlocal):
                scope.declared_nonlocal.update(node.names)

    def _collect(self, node: ast.AST, scope: Scope) -> None:
        if isinstance(node, ast.Module):
            self._declare(node.body, scope)
        for child in ast.iter_child_nodes(node):
            self._visit(child, scope)

    def _visit(self, node: ast.AST, scope: Scope) -> None:
        self.scope_of[id(node)] = scope
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self._visit_function(node, scope)
            return
        if isinstance(node, ast.Lambda):
            self._visit_function(node, scope)
            return
        if isinstance(node, ast.ClassDef):
            for child in (*node.decorator_list, *node.bases, *node.keywords):
                self._visit(child, scope)
            inner = Scope(node, "class", scope)
            self.scope_for_node[id(node)] = inner
            self._declare(node.body, inner)
            for stmt in node.body:
                self._visit(stmt, inner)
            self._bind_target(ast.Name(node.name, ast.Store()), UserValue(id(node), node.name), scope)
            return
        if isinstance(node, _COMPREHENSIONS):
            self._visit_comprehension(node, scope)
            return
        self._bind_statement(node, scope)
        for child in ast.iter_child_nodes(node):
            self._visit(child, scope)

    def _visit_function(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, scope: Scope
    ) -> None:
        args = node.args
        decorators = [] if isinstance(node, ast.Lambda) else node.decorator_list
        returns = [] if isinstance(node, ast.Lambda) or node.returns is None else [node.returns]
        annotations = [a.annotation for a in _all_args(args) if a.annotation is not None]
        for child in (
            *decorators,
            *args.defaults,
            *(d for d in args.kw_defaults if d),
            *returns,
            *annotations,
        ):
            self._visit(child, scope)
        inner = Scope(node, "function", scope)
        self.scope_for_node[id(node)] = inner
        positional = [*args.posonlyargs, *args.args]
        defaults: dict[str, ast.expr] = dict(
            zip(
                [a.arg for a in positional[len(positional) - len(args.defaults) :]],
                args.defaults,
                strict=True,
            )
        )
        defaults.update(
            {a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None}
        )
        for arg in _all_args(args):
            inner.bind(arg.arg, DATA, inner)
            if arg.arg in defaults:
                inner.bind(arg.arg, defaults[arg.arg], scope)
                self.tracked.add(id(defaults[arg.arg]))
        body = [node.body] if isinstance(node, ast.Lambda) else node.body
        if not isinstance(node, ast.Lambda):
            self._declare(node.body, inner)
        for stmt in body:
            self._visit(stmt, inner)
        if not isinstance(node, ast.Lambda):
            is_kernel = scope.kind == "module" and node.name in self.kernels
            value: Value = KernelValue(node.name) if is_kernel else UserValue(id(node), node.name)
            self._bind_target(ast.Name(node.name, ast.Store()), value, scope)

    def _visit_comprehension(self, node: ast.AST, scope: Scope) -> None:
        generators: list[ast.comprehension] = node.generators  # type: ignore[attr-defined]
        self._visit(generators[0].iter, scope)  # the first iterable is evaluated outside
        inner = Scope(node, "comprehension", scope)
        self.scope_for_node[id(node)] = inner
        for index, gen in enumerate(generators):
            self.scope_of[id(gen)] = inner
            if index:
                self._visit(gen.iter, inner)
            self._bind_target(gen.target, DATA, inner)
            self._visit(gen.target, inner)
            for cond in gen.ifs:
                self._visit(cond, inner)
        for part in ("elt", "key", "value"):
            child = getattr(node, part, None)
            if child is not None:
                self._visit(child, inner)

    def _bind_statement(self, node: ast.AST, scope: Scope) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self._bind_target(target, node.value, scope)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            self._bind_target(node.target, node.value, scope)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            self._bind_target(node.target, DATA, scope)
        elif isinstance(node, ast.NamedExpr):
            self._bind_target(node.target, node.value, scope, walrus=True)
        elif isinstance(node, ast.For | ast.AsyncFor):
            self._bind_target(node.target, DATA, scope)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            self._bind_target(node.optional_vars, DATA, scope)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self._bind_target(ast.Name(node.name, ast.Store()), DATA, scope)
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            self._bind_target(ast.Name(node.name, ast.Store()), DATA, scope)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            self._bind_target(ast.Name(node.rest, ast.Store()), DATA, scope)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    value = module_value(alias.name)
                else:
                    value = module_value(alias.name.split(".")[0])
                self._bind_target(
                    ast.Name(alias.asname or alias.name.split(".")[0], ast.Store()), value, scope
                )
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            base = module_value(node.module)
            for alias in node.names:
                if alias.name == "*":
                    continue  # rejected by the gate; binds nothing it could resolve
                self._bind_target(
                    ast.Name(alias.asname or alias.name, ast.Store()), step(base, alias.name), scope
                )

    # --- evaluation -----------------------------------------------------------------------------
    def defining_scope(self, name: str, scope: Scope) -> Scope | None:
        current: Scope | None = scope
        first = True
        while current is not None:
            if name in current.declared_global:
                return self.module_scope if name in self.module_scope.bindings else None
            skip_class = current.kind == "class" and not first  # methods do not see class attributes
            if not skip_class and name in current.bindings and name not in current.declared_nonlocal:
                return current
            first = False
            current = current.parent
        return None

    def owner(self, scope: Scope, name: str) -> Scope:
        """The scope whose variable a binding in `scope` assigns (`nonlocal` assigns an outer one)."""
        if name in scope.declared_nonlocal and scope.parent is not None:
            return self.defining_scope(name, scope.parent) or scope
        return scope

    def lookup(self, name: str, scope: Scope) -> frozenset[Value]:
        owner = self.defining_scope(name, scope)
        if owner is not None:
            key = (id(owner), name)
            if key in self.unstable:
                return frozenset({UnresolvedValue(f"the values of {name} do not settle")})
            return self.values.get(key, frozenset())
        if name in builtins.__dict__:
            return frozenset({MemberValue("builtins", (name,))})
        if name.startswith("__") and name.endswith("__"):
            return frozenset({DATA})  # implicit module globals; their names are checked by the gate
        return frozenset({UnresolvedValue(f"name {name} is never bound")})

    def eval(self, node: ast.AST, scope: Scope | None = None) -> frozenset[Value]:
        """The values `node` may have (after solving, memoised per node: chains are evaluated once)."""
        own = self.scope_of.get(id(node)) or scope or self.module_scope
        if self._memo is None:
            return self._eval(node, scope or own)
        if id(node) not in self._memo:
            self._memo[id(node)] = self._eval(node, own)
        return self._memo[id(node)]

    def _eval(self, node: ast.AST, scope: Scope) -> frozenset[Value]:
        if isinstance(node, ast.Name):
            return self.lookup(node.id, scope)
        if isinstance(node, ast.Attribute):
            return frozenset(step(v, node.attr) for v in self.eval(node.value, scope))
        if isinstance(node, ast.NamedExpr):
            return self.eval(node.value, scope)
        if isinstance(node, ast.IfExp):
            return self.eval(node.body, scope) | self.eval(node.orelse, scope)
        if isinstance(node, ast.BoolOp):
            return frozenset().union(*(self.eval(v, scope) for v in node.values))
        if isinstance(node, ast.Lambda):
            return frozenset({UserValue(id(node), "<lambda>")})
        if isinstance(node, ast.Call):
            return self._eval_call(node, scope)
        return frozenset({DATA})

    def _eval_call(self, node: ast.Call, scope: Scope) -> frozenset[Value]:
        out: set[Value] = set()
        for func in self.eval(node.func, scope):
            name = constant_attr_name(node)
            if func == MemberValue("builtins", ("getattr",)) and name is not None:
                out.update(step(v, name) for v in self.eval(node.args[0], scope))
                if len(node.args) == 3:
                    out.update(self.eval(node.args[2], scope))
            elif func in (
                MemberValue("builtins", ("__import__",)),
                MemberValue("importlib", ("import_module",)),
            ):
                target = _constant_str(node.args[0]) if node.args else None
                out.add(
                    module_value(target)
                    if target
                    else UnresolvedValue("a module imported by a computed name")
                )
            else:
                out.add(DATA)
        return frozenset(out)

    def _solve(self) -> None:
        bindings = [
            (scope, name, sources) for scope in self._all_scopes() for name, sources in scope.bindings.items()
        ]
        keys = [(id(self.owner(scope, name)), name) for scope, name, _ in bindings]
        for _ in range(MAX_ROUNDS):
            changed = False
            for key, (_scope, _name, sources) in zip(keys, bindings, strict=True):
                current = self.values.get(key, frozenset())
                new = set(current)
                for source, where in sources:
                    if isinstance(source, ast.AST):
                        new.update(self.eval(source, where))
                    else:
                        new.add(source)
                if new != current:
                    self.values[key] = frozenset(new)
                    changed = True
            if not changed:
                return
        self.unstable.update(keys)

    def _all_scopes(self) -> Iterator[Scope]:
        yield self.module_scope
        yield from {id(s): s for s in self.scope_for_node.values()}.values()


def constant_attr_name(node: ast.Call) -> str | None:
    """The attribute name of getattr(x, "name"[, default]) / hasattr(x, "name") when it is a constant."""
    if node.keywords or not 2 <= len(node.args) <= 3 or any(isinstance(a, ast.Starred) for a in node.args):
        return None
    return _constant_str(node.args[1])


def _constant_str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _all_args(args: ast.arguments) -> list[ast.arg]:
    extra = [a for a in (args.vararg, args.kwarg) if a is not None]
    return [*args.posonlyargs, *args.args, *args.kwonlyargs, *extra]


def _walk_scope_local(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """Nodes of a scope's own body, not descending into nested functions, classes or comprehensions."""
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef, *_COMPREHENSIONS)):
            continue
        stack.extend(ast.iter_child_nodes(node))
