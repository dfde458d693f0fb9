"""Static gate: AST checks run on a candidate before it gets any device time.

The gate is deliberately strict and heuristic: candidates are small launcher modules, and anything an
honest launcher has no use for (file I/O, introspection, dynamic code, host numerics) is rejected with
a rule name and a line. Runtime checks in the child back it up (recorded aten ops, launch counting),
and the parent's own comparison is the final word either way.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.verify import policy

# Attributes whose use marks a bare name as a tensor (evidence for the host-arithmetic rule).
_TENSOR_ATTRS = frozenset(
    {"shape", "ndim", "dtype", "device", "T", "mT", "is_cuda", "stride", "numel", "size", "dim", "data_ptr",
     "is_contiguous", "contiguous", "element_size", "storage_offset", "view", "reshape", "new_empty",
     "new_zeros"}
)  # fmt: skip
_TORCH_ALLOCATORS = frozenset(
    {"torch.empty", "torch.empty_like", "torch.empty_strided", "torch.zeros", "torch.zeros_like"}
)
# Allowed methods that return a tensor (so the result is a tensor name too).
_VIEWISH_METHODS = frozenset(
    {"view", "view_as", "reshape", "reshape_as", "contiguous", "unsqueeze", "squeeze", "flatten", "t",
     "transpose", "permute", "expand", "new_empty", "new_zeros"}
)  # fmt: skip
_BUILTINS_ON_TENSORS = frozenset(
    {"sum", "abs", "float", "int", "bool", "list", "tuple", "max", "min", "sorted", "iter", "round", "pow",
     "map", "zip", "enumerate", "complex", "divmod", "next", "any", "all"}
)  # fmt: skip
_IDENTITY = (ast.Is, ast.IsNot)
_TORCH_EXTRA_ALLOW = frozenset({"torch.no_grad", "torch.inference_mode"})


@dataclass(frozen=True)
class Violation:
    rule: str
    line: int
    message: str


@dataclass(frozen=True)
class StaticReport:
    violations: tuple[Violation, ...]
    unverifiable: tuple[Violation, ...]  # features the CPU interpreter cannot run faithfully
    kernels: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.violations


def check_file(path: str | Path, entry: str) -> StaticReport:
    return check_source(Path(path).read_text(encoding="utf-8"), entry)


def check_source(source: str, entry: str) -> StaticReport:
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return StaticReport((Violation("syntax_error", exc.lineno or 0, str(exc.msg)),), (), ())
    return _Gate(tree, entry).run()


def _is_internal(dotted: str) -> bool:
    for prefix in policy.INTERNAL_PREFIXES:
        if prefix.endswith("_"):
            if dotted.startswith(prefix):
                return True
        elif dotted == prefix or dotted.startswith(prefix + "."):
            return True
    return False


def _walk(node: ast.AST, skip: frozenset[int] = frozenset()) -> Iterator[ast.AST]:
    """ast.walk that does not descend into the nodes whose id() is in skip."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(c for c in ast.iter_child_nodes(current) if id(c) not in skip)


@dataclass
class _Gate:
    tree: ast.Module
    entry: str
    aliases: dict[str, str] = field(default_factory=dict)  # local name -> dotted import path
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)  # module-level defs
    kernels: set[str] = field(default_factory=set)
    found: dict[tuple[str, int], Violation] = field(default_factory=dict)
    features: dict[tuple[str, int], Violation] = field(default_factory=dict)

    # --- helpers -------------------------------------------------------------------------------
    def flag(self, rule: str, node: ast.AST, detail: str) -> None:
        line = getattr(node, "lineno", 0)
        self.found.setdefault((rule, line), Violation(rule, line, detail))

    def feature(self, name: str, node: ast.AST, detail: str) -> None:
        line = getattr(node, "lineno", 0)
        self.features.setdefault((name, line), Violation(name, line, detail))

    def resolve(self, node: ast.AST) -> str | None:
        """Dotted import path of a Name/Attribute chain rooted at an imported name, else None."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def is_jit(self, deco: ast.AST) -> str | None:
        target = self.resolve(deco.func if isinstance(deco, ast.Call) else deco)
        if target in ("triton.jit", "triton.runtime.jit.jit"):
            return "jit"
        if target in ("triton.autotune", "triton.heuristics"):
            return target.split(".")[-1]
        return None

    # --- passes --------------------------------------------------------------------------------
    def run(self) -> StaticReport:
        self.collect_imports()
        for stmt in self.tree.body:
            if isinstance(stmt, ast.FunctionDef):
                self.functions[stmt.name] = stmt
                kinds = {self.is_jit(d) for d in stmt.decorator_list} - {None}
                if "jit" in kinds:
                    self.kernels.add(stmt.name)
                if "autotune" in kinds:
                    self.feature("autotune", stmt, f"@triton.autotune on {stmt.name}")
        kernel_defs = [self.functions[k] for k in sorted(self.kernels)]
        skip = frozenset(id(k) for k in kernel_defs)
        for node in _walk(self.tree, skip):
            self.check_common(node)
            self.check_host_node(node)
        for kdef in kernel_defs:
            for deco in kdef.decorator_list:
                for node in _walk(deco):
                    self.check_common(node)
            for stmt in kdef.body:
                for node in _walk(stmt):
                    self.check_common(node)
                    self.check_kernel_node(node)
        host_scopes: list[ast.AST] = [f for f in self.functions.values() if f.name not in self.kernels]
        host_scopes.append(ast.Module(body=[s for s in self.tree.body if not isinstance(s, ast.FunctionDef)]))
        for scope in host_scopes:
            self.check_tensor_compute(scope)
        self.check_entry_and_launches()
        ordered = sorted(self.found.values(), key=lambda v: (v.line, v.rule))
        feats = sorted(self.features.values(), key=lambda v: (v.line, v.rule))
        return StaticReport(tuple(ordered), tuple(feats), tuple(sorted(self.kernels)))

    def collect_imports(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.check_import(node, a.name)
                    local = a.asname or a.name.split(".")[0]
                    self.aliases[local] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    self.flag("forbidden_import", node, "relative imports are not allowed")
                    continue
                for a in node.names:
                    dotted = f"{node.module}.{a.name}"
                    self.check_import(node, dotted if a.name != "*" else node.module or "")
                    self.aliases[a.asname or a.name] = dotted

    def check_import(self, node: ast.AST, dotted: str) -> None:
        root = dotted.split(".")[0]
        if _is_internal(dotted):
            self.flag("runtime_internals", node, f"import of {dotted}")
        elif root in policy.MODULE_RULES:
            self.flag(policy.MODULE_RULES[root], node, f"import of {dotted}")
        elif root not in policy.ALLOWED_IMPORT_ROOTS:
            self.flag("forbidden_import", node, f"import of {dotted}")
        if "libdevice" in dotted:
            self.feature("libdevice", node, f"import of {dotted}")

    def check_common(self, node: ast.AST) -> None:
        """Rules that apply everywhere: kernels, launchers and module level."""
        if isinstance(node, ast.Attribute):
            dotted = self.resolve(node)
            if dotted and _is_internal(dotted):
                self.flag("runtime_internals", node, f"use of {dotted}")
            dunder = node.attr.startswith("__") and node.attr.endswith("__")
            if node.attr in policy.DUNDER_INTROSPECTION or (dunder and node.attr not in policy.DUNDER_ALLOW):
                self.flag("introspection", node, f"access to .{node.attr}")
            if node.attr == "libdevice":
                self.feature("libdevice", node, "libdevice call")
            if node.attr == "inline_asm_elementwise":
                self.feature("inline_asm", node, "tl.inline_asm_elementwise")
            if node.attr == "bfloat16":
                self.feature("bf16", node, "bfloat16 arithmetic")
            if isinstance(node.ctx, ast.Store | ast.Del):
                self.check_store(node)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
            self.check_store(node)
        elif isinstance(node, ast.Name):
            if node.id == "__builtins__":
                self.flag("introspection", node, "access to __builtins__")
            dotted = self.aliases.get(node.id, "")
            if dotted.endswith("inline_asm_elementwise"):
                self.feature("inline_asm", node, "inline_asm_elementwise")
            if dotted.endswith("bfloat16"):
                self.feature("bf16", node, "bfloat16 arithmetic")
        elif isinstance(node, ast.Constant) and node.value in ("bf16", "bfloat16"):
            self.feature("bf16", node, "bfloat16 arithmetic")
        elif isinstance(node, ast.Call):
            self.check_call_common(node)

    def check_store(self, node: ast.Attribute | ast.Subscript) -> None:
        root: ast.AST = node
        while isinstance(root, ast.Attribute | ast.Subscript):
            root = root.value
        if isinstance(root, ast.Name) and (root.id in self.aliases or root.id in self.kernels):
            self.flag("monkeypatch", node, f"assignment into {ast.unparse(node)}")

    def check_call_common(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id not in self.aliases and func.id in policy.BUILTIN_RULES:
            if func.id not in self.functions:
                self.flag(policy.BUILTIN_RULES[func.id], node, f"call to {func.id}()")
        dotted = self.resolve(func)
        if not dotted:
            return
        if dotted.startswith("os."):
            self.check_os_call(node, dotted)
        elif dotted in ("torch.save", "torch.load"):
            self.flag("file_io", node, f"call to {dotted}")
        elif dotted in ("contextlib.suppress",):
            self.flag("try_except_fallback", node, "contextlib.suppress")

    def check_os_call(self, node: ast.Call, dotted: str) -> None:
        if dotted in policy.OS_ALLOWED or dotted.startswith(policy.OS_ALLOWED_PREFIXES):
            return
        name = dotted.split(".")[1]
        if name in policy.OS_PROCESS or name.startswith(policy.OS_PROCESS_PREFIXES):
            self.flag("process_control", node, f"call to {dotted}")
        elif name in ("putenv", "unsetenv") or dotted.startswith("os.environ."):
            self.flag("monkeypatch", node, f"call to {dotted}")
        else:
            self.flag("file_io", node, f"call to {dotted}")

    def check_host_node(self, node: ast.AST) -> None:
        if isinstance(node, ast.Call):
            dotted = self.resolve(node.func)
            if dotted and dotted.startswith("torch.") and dotted not in ("torch.save", "torch.load"):
                internal = _is_internal(dotted)
                allowed = dotted in policy.TORCH_CALL_ALLOW or dotted in _TORCH_EXTRA_ALLOW
                if not internal and not allowed:
                    self.flag("torch_compute", node, f"call to {dotted}")
            elif (
                dotted is None
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in policy.TENSOR_COMPUTE_METHODS
                and not isinstance(node.func.value, ast.Constant | ast.JoinedStr)
                and not (isinstance(node.func.value, ast.Name) and node.func.value.id in self.kernels)
            ):
                self.flag("torch_compute", node, f"tensor method .{node.func.attr}()")
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                if (self.resolve(base) or "").startswith("torch"):
                    self.flag("runtime_internals", node, f"class derived from {self.resolve(base)}")

    def check_kernel_node(self, node: ast.AST) -> None:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            dotted = self.aliases.get(node.id)
            if dotted and dotted.split(".")[0] != "triton":
                self.flag("non_triton_in_kernel", node, f"{dotted} used inside a kernel")
            elif node.id in self.functions and node.id not in self.kernels:
                self.flag("non_triton_in_kernel", node, f"plain Python helper {node.id} called in a kernel")

    # --- host-side tensor arithmetic -------------------------------------------------------------
    def tensor_names(self, scope: ast.AST) -> set[str]:
        names: set[str] = set()
        for node in ast.walk(scope):
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
                continue
            if node.attr in _TENSOR_ATTRS and node.value.id not in self.aliases.keys() | self.kernels:
                names.add(node.value.id)
        for _ in range(3):  # a few rounds reach a fixpoint for straight-line launchers
            for node in ast.walk(scope):
                if isinstance(node, ast.Assign) and self.is_tensor_expr(node.value, names):
                    names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        return names

    def is_tensor_expr(self, node: ast.AST, names: set[str]) -> bool:
        if isinstance(node, ast.Name):
            return node.id in names
        if isinstance(node, ast.Subscript):
            return self.is_tensor_expr(node.value, names)
        if isinstance(node, ast.Attribute):
            return node.attr in ("T", "mT") and self.is_tensor_expr(node.value, names)
        if isinstance(node, ast.Call):
            dotted = self.resolve(node.func)
            if dotted in _TORCH_ALLOCATORS:
                return True
            func = node.func
            return (
                isinstance(func, ast.Attribute)
                and (func.attr in _VIEWISH_METHODS or func.attr in policy.TENSOR_COMPUTE_METHODS)
                and self.is_tensor_expr(func.value, names)
            )
        return False

    def check_tensor_compute(self, scope: ast.AST) -> None:
        names = self.tensor_names(scope)
        if not names:
            return
        skip = frozenset(id(f) for f in self.functions.values() if f is not scope)
        for node in _walk(scope, skip):
            operands: list[ast.AST] = []
            if isinstance(node, ast.BinOp):
                operands = [node.left, node.right]
            elif isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
                operands = [node.operand]
            elif isinstance(node, ast.AugAssign):
                operands = [node.target, node.value]
            elif isinstance(node, ast.Compare) and not all(isinstance(o, _IDENTITY) for o in node.ops):
                operands = [node.left, *node.comparators]
            elif isinstance(node, ast.Assign):
                operands = [t for t in node.targets if isinstance(t, ast.Subscript)]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in _BUILTINS_ON_TENSORS and node.func.id not in self.functions:
                    operands = list(node.args)
            if any(self.is_tensor_expr(o, names) for o in operands):
                self.flag("torch_compute", node, f"host-side tensor computation: {ast.unparse(node)[:60]}")

    # --- entry, launches, fallbacks --------------------------------------------------------------
    def is_launch(self, node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Subscript)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in self.kernels
        )

    def launching_functions(self) -> set[str]:
        direct: dict[str, bool] = {}
        callees: dict[str, set[str]] = {}
        for name, fn in self.functions.items():
            if name in self.kernels:
                continue
            nodes = list(ast.walk(fn))
            direct[name] = any(self.is_launch(n) for n in nodes)
            callees[name] = {
                n.func.id
                for n in nodes
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in self.functions
            }
        launching = {n for n, d in direct.items() if d}
        changed = True
        while changed:
            changed = False
            for name, called in callees.items():
                if name not in launching and called & launching:
                    launching.add(name)
                    changed = True
        return launching

    def check_entry_and_launches(self) -> None:
        if not self.kernels:
            self.flag("no_triton_kernel", self.tree, "no @triton.jit function is defined")
        entry = self.functions.get(self.entry)
        if entry is None:
            for stmt in self.tree.body:  # `entry = _impl` re-exports count
                if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name):
                    if any(isinstance(t, ast.Name) and t.id == self.entry for t in stmt.targets):
                        entry = self.functions.get(stmt.value.id)
        if entry is None or entry.name in self.kernels:
            self.flag("missing_entry", self.tree, f"entry function {self.entry!r} is not defined")
            return
        launching = self.launching_functions()
        if self.kernels and entry.name not in launching:
            self.flag("no_kernel_launch", entry, f"{self.entry} never launches a kernel[grid](...)")
        skip = frozenset(id(self.functions[k]) for k in self.kernels)
        for node in _walk(self.tree, skip):
            if isinstance(node, ast.Try | ast.TryStar):
                guarded = [n for stmt in node.body for n in ast.walk(stmt)]
                if any(
                    self.is_launch(n)
                    or (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in launching)
                    for n in guarded
                ):
                    self.flag("try_except_fallback", node, "kernel launch inside try/except")
