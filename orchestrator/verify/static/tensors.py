"""Host-side tensor work the static gate can see: arithmetic, truth values, loops and element access
on values that are evidently tensors, and anything done to the kernel arguments inside a launch.

Tensor-ness is tracked per variable (the scope that owns it, so closures and grid lambdas share it):
a name used with a tensor attribute (`.shape`, `.numel()`, ...), assigned from an allocator or a
view of a tensor, passed a tensor at a call site of a candidate function, or read from a launch
callable's argument dict under the name of a kernel pointer parameter. This is a heuristic that
backs the runtime monitor; the allow-lists in `targets` are what the gate relies on.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable

from orchestrator.verify import policy
from orchestrator.verify.static import policy as sp
from orchestrator.verify.static.names import Resolver, Scope
from orchestrator.verify.static.values import DATA, KernelValue, MemberValue, UserValue

# Attributes whose use marks a name as a tensor.
TENSOR_EVIDENCE_ATTRS = frozenset(
    "shape ndim dtype device T mT is_cuda stride numel size dim data_ptr is_contiguous contiguous"
    " element_size storage_offset view reshape new_empty new_zeros".split()
)
VIEW_METHODS = frozenset(
    "view view_as reshape reshape_as contiguous unsqueeze squeeze flatten t transpose permute expand"
    " new_empty new_zeros".split()
)
_TENSOR_VALUED_ATTRS = frozenset({"T", "mT", "H", "mH", "data", "grad", "real", "imag"})
# Calls of these with a tensor argument read its values on the host.
_VALUE_READING_ROOTS = ("builtins.", "math.", "itertools.", "functools.", "collections.", "operator.")
_PRINTING = frozenset(
    {"builtins.print", "builtins.str", "builtins.repr", "builtins.format", "builtins.ascii"}
)
_POINTER_OPS = frozenset(
    "load store make_block_ptr make_tensor_descriptor atomic_add atomic_max atomic_min atomic_and atomic_or"
    " atomic_xor atomic_xchg atomic_cas".split()
)

Flag = Callable[[str, ast.AST, str], None]
Var = tuple[int, str]


def pointer_params(kernel: ast.FunctionDef) -> frozenset[str]:
    """Parameters of a kernel that are tensors at launch (the bases of its pointer arithmetic)."""
    params = {a.arg for a in (*kernel.args.posonlyargs, *kernel.args.args, *kernel.args.kwonlyargs)}
    found = {p for p in params if p.lower().endswith("ptr")}
    for node in ast.walk(kernel):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in _POINTER_OPS:
            continue
        bases = [k.value for k in node.keywords if k.arg in ("pointer", "base", "ptr")] + node.args[:1]
        for base in bases:
            found.update(n for n in _added_names(base) if n in params)
    return frozenset(found)


def _added_names(node: ast.AST) -> Iterable[str]:
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        yield from _added_names(node.left)
        yield from _added_names(node.right)
    elif isinstance(node, ast.Subscript):
        yield from _added_names(node.value)


class TensorHeuristics:
    def __init__(
        self,
        resolver: Resolver,
        host_nodes: Iterable[ast.AST],
        launch_callables: dict[int, frozenset[str]],  # id(def or lambda) -> the kernel's pointer params
        launches: list[tuple[ast.Call, ast.FunctionDef]],  # kernel[grid](...) calls and their kernels
        flag: Flag,
    ) -> None:
        self.r = resolver
        self.launches = launches
        self.nodes = list(host_nodes)
        self.flag = flag
        self.tensors: set[Var] = set()
        self.meta: dict[Var, frozenset[str]] = {}  # launch-argument dicts -> tensor keys
        self.callable_scopes = {
            id(resolver.scope_for_node[k]): v
            for k, v in launch_callables.items()
            if k in resolver.scope_for_node
        }
        for key, pointers in launch_callables.items():
            scope = resolver.scope_for_node.get(key)
            if scope is not None:
                for name in scope.bindings:
                    if _is_param(scope, name):
                        self.meta[(id(scope), name)] = pointers

    # --- tensor-ness ----------------------------------------------------------------------------
    def var(self, name: str, scope: Scope) -> Var | None:
        owner = self.r.defining_scope(name, scope)
        return (id(owner), name) if owner is not None else None

    def scope(self, node: ast.AST) -> Scope:
        return self.r.scope_of.get(id(node), self.r.module_scope)

    def is_tensor(self, node: ast.AST) -> bool:
        scope = self.scope(node)
        if isinstance(node, ast.Name):
            return self.var(node.id, scope) in self.tensors
        if isinstance(node, ast.Subscript):
            if self.is_tensor(node.value):
                return True
            meta = self.var(node.value.id, scope) if isinstance(node.value, ast.Name) else None
            if meta in self.meta:
                key = node.slice
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                    return True
                return key.value in self.meta[meta]
            return False
        if isinstance(node, ast.Attribute):
            return node.attr in _TENSOR_VALUED_ATTRS and self.is_tensor(node.value)
        if isinstance(node, ast.Call):
            if any(
                isinstance(v, MemberValue) and v.display in sp.TORCH_ALLOCATORS
                for v in self.r.eval(node.func)
            ):
                return True
            func = node.func
            methods = VIEW_METHODS | policy.TENSOR_COMPUTE_METHODS
            return isinstance(func, ast.Attribute) and func.attr in methods and self.is_tensor(func.value)
        if isinstance(node, ast.IfExp):
            return self.is_tensor(node.body) or self.is_tensor(node.orelse)
        if isinstance(node, ast.NamedExpr | ast.Starred):
            return self.is_tensor(node.value)
        if isinstance(node, ast.BinOp):
            return self.is_tensor(node.left) or self.is_tensor(node.right)
        return False

    def holds_tensor(self, node: ast.AST) -> bool:
        """A tensor, or a display or comprehension whose elements are tensors (sum([x, y]))."""
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return any(self.holds_tensor(e) for e in node.elts)
        if isinstance(node, ast.Dict):
            return any(self.holds_tensor(v) for v in node.values)
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp):
            return self.holds_tensor(node.elt)
        if isinstance(node, ast.DictComp):
            return self.holds_tensor(node.value)
        return self.is_tensor(node)

    def _evidence(self) -> None:
        for call, kernel in self.launches:  # what is passed for a pointer parameter is a tensor
            pointers = pointer_params(kernel)
            params = [a.arg for a in (*kernel.args.posonlyargs, *kernel.args.args)]
            pairs = [*zip(params, call.args, strict=False), *((k.arg, k.value) for k in call.keywords)]
            for param, arg in pairs:
                if param in pointers and isinstance(arg, ast.Name):
                    var = self.var(arg.id, self.scope(arg))
                    if var is not None:
                        self.tensors.add(var)
        for node in self.nodes:
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.attr in TENSOR_EVIDENCE_ATTRS and DATA in self.r.eval(node.value):
                    var = self.var(node.value.id, self.scope(node.value))
                    if var is not None:
                        self.tensors.add(var)

    def _propagate(self) -> bool:
        before = (len(self.tensors), len(self.meta))
        for scope in self.r._all_scopes():
            for name, sources in scope.bindings.items():
                var = (id(self.r.owner(scope, name)), name)
                for source, _where in sources:
                    if isinstance(source, ast.AST) and self.is_tensor(source):
                        self.tensors.add(var)
        for node in self.nodes:
            if isinstance(node, ast.Call):
                self._seed_callees(node)
            elif isinstance(node, ast.comprehension | ast.For) and isinstance(node.target, ast.Name):
                if self.holds_tensor(node.iter):  # for v in (x, y): v is a tensor
                    loop_var = self.var(node.target.id, self.scope(node.target))
                    if loop_var is not None:
                        self.tensors.add(loop_var)
        return before != (len(self.tensors), len(self.meta))

    def _seed_callees(self, call: ast.Call) -> None:
        for value in self.r.eval(call.func):
            if not isinstance(value, UserValue):
                continue
            inner = self.r.scope_for_node.get(value.node)
            definition = inner.node if inner is not None else None
            if not isinstance(definition, ast.FunctionDef | ast.Lambda):
                continue
            params = [a.arg for a in (*definition.args.posonlyargs, *definition.args.args)]
            pairs = list(zip(params, call.args, strict=False))
            pairs += [(k.arg, k.value) for k in call.keywords if k.arg]
            for param, arg in pairs:
                if isinstance(arg, ast.Starred):
                    continue
                target = (id(inner), param)
                if self.is_tensor(arg):
                    self.tensors.add(target)
                if isinstance(arg, ast.Name):
                    source = self.var(arg.id, self.scope(arg))
                    if source in self.meta and target not in self.meta:
                        self.meta[target] = self.meta[source]

    # --- rules ----------------------------------------------------------------------------------
    def run(self) -> None:
        self._evidence()
        for _ in range(8):
            if not self._propagate():
                break
        for node in self.nodes:
            self._check(node)
        for call, kernel in self.launches:
            self._check_launch(call, kernel)

    def _check_launch(self, call: ast.Call, kernel: ast.FunctionDef) -> None:
        """What a launch passes a kernel: no tensor as a constexpr (the interpreter hands the raw
        tensor to the kernel body, whose method calls then run torch on the host), and a
        @triton.jit function for every parameter the kernel calls."""
        params = [a.arg for a in (*kernel.args.posonlyargs, *kernel.args.args)]
        passed = dict(zip(params, call.args, strict=False))
        passed.update({k.arg: k.value for k in call.keywords if k.arg})
        for param in constexpr_params(kernel) & passed.keys():
            if self.holds_tensor(passed[param]):
                self.flag(
                    "non_triton_in_kernel", call, f"a tensor passed as constexpr {param} of {kernel.name}"
                )
        defaults = _defaults(kernel)
        for param in called_params(kernel):
            source = passed.get(param, defaults.get(param))
            values = self.r.eval(source) if source is not None else frozenset()
            if not values or not all(isinstance(v, KernelValue) for v in values):
                self.flag(
                    "non_triton_in_kernel",
                    call,
                    f"{kernel.name} calls its parameter {param}: pass a @triton.jit function for it",
                )

    def _check(self, node: ast.AST) -> None:
        text = ast.unparse(node)[:60]
        operands: list[ast.AST] = []
        if isinstance(node, ast.BinOp):
            operands = [node.left, node.right]
        elif isinstance(node, ast.UnaryOp):
            operands = [node.operand]
        elif isinstance(node, ast.AugAssign):
            operands = [node.target, node.value]
        elif isinstance(node, ast.Compare) and not all(isinstance(o, ast.Is | ast.IsNot) for o in node.ops):
            operands = [node.left, *node.comparators]
        if any(self.is_tensor(o) for o in operands):
            self.flag("torch_compute", node, f"host-side tensor computation: {text}")
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript | ast.Attribute) and self.is_tensor(target.value):
                    self.flag("torch_compute", node, f"host-side write into a tensor: {text}")
        tests: list[ast.AST] = []
        if isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert):
            tests = [node.test]
        elif isinstance(node, ast.BoolOp):
            tests = list(node.values)
        if any(self.is_tensor(t) for t in tests):
            self.flag("torch_compute", node, f"truth value of a tensor read on the host: {text}")
        iters = [node.iter] if isinstance(node, ast.For | ast.AsyncFor | ast.comprehension) else []
        if any(self.is_tensor(i) for i in iters):
            self.flag("torch_compute", node, "a Python loop over a tensor's elements (host compute)")
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            index = node.slice
            parts = index.elts if isinstance(index, ast.Tuple) else [index]
            flat = [
                q for p in parts for q in ((p.lower, p.upper, p.step) if isinstance(p, ast.Slice) else (p,))
            ]
            if any(p is not None and self.is_tensor(p) for p in flat):
                self.flag("torch_compute", node, f"indexing with a tensor on the host: {text}")
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Load)
            and node.attr in policy.TENSOR_COMPUTE_METHODS
            and node.attr not in sp.TENSOR_PROPERTIES
            and self.is_tensor(node.value)
        ):  # a bound tensor method taken as a value (f = x.add; f(y))
            self.flag("torch_compute", node, f"tensor method .{node.attr} taken as a value")
        if isinstance(node, ast.FormattedValue) and self.is_tensor(node.value):
            self.flag("host_compute", node, "formatting a tensor reads its values on the host")
        if isinstance(node, ast.Call):
            self._check_call(node, text)

    def _check_call(self, node: ast.Call, text: str) -> None:
        targets = [v for v in self.r.eval(node.func) if isinstance(v, MemberValue)]
        args = [*node.args, *(k.value for k in node.keywords)]
        if any(isinstance(a, ast.Starred) and self.is_tensor(a.value) for a in node.args):
            self.flag("torch_compute", node, f"unpacking a tensor's elements on the host: {text}")
        tensor_arg = any(self.holds_tensor(a) for a in args)
        for target in targets:
            path = target.display
            if path.startswith("torch.") and self._in_launch_callable(node):
                self.flag(
                    "torch_compute", node, f"call to {path} inside a launch callable (runs in the launch)"
                )
            if not tensor_arg or path in sp.TENSOR_SAFE_CALLS:
                continue
            if path in _PRINTING:
                self.flag("host_compute", node, f"{path} of a tensor reads its values on the host")
            elif path.startswith(_VALUE_READING_ROOTS):
                self.flag("torch_compute", node, f"host-side tensor computation: {text}")

    def _in_launch_callable(self, node: ast.AST) -> bool:
        """Whether node runs inside a launch callable (or something nested in one)."""
        scope: Scope | None = self.scope(node)
        while scope is not None:
            if id(scope) in self.callable_scopes:
                return True
            scope = scope.parent
        return False


def constexpr_params(kernel: ast.FunctionDef) -> set[str]:
    args = (*kernel.args.posonlyargs, *kernel.args.args, *kernel.args.kwonlyargs)
    return {a.arg for a in args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)}


def called_params(kernel: ast.FunctionDef) -> set[str]:
    """Parameters the kernel body calls (constexpr functions: they must be @triton.jit functions)."""
    params = {a.arg for a in (*kernel.args.posonlyargs, *kernel.args.args, *kernel.args.kwonlyargs)}
    return {
        n.func.id
        for stmt in kernel.body
        for n in ast.walk(stmt)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in params
    }


def _defaults(kernel: ast.FunctionDef) -> dict[str, ast.expr]:
    positional = [*kernel.args.posonlyargs, *kernel.args.args]
    named = positional[len(positional) - len(kernel.args.defaults) :]
    out = {a.arg: d for a, d in zip(named, kernel.args.defaults, strict=True)}
    out.update({a.arg: d for a, d in zip(kernel.args.kwonlyargs, kernel.args.kw_defaults, strict=True) if d})
    return out


def _is_param(scope: Scope, name: str) -> bool:
    node = scope.node
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        return False
    args = node.args
    extra = [a for a in (args.vararg, args.kwarg) if a is not None]
    return name in {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, *extra)}
