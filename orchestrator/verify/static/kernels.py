"""Rules for @triton.jit bodies: only Triton, nothing the interpreter would run as plain Python that a
compiled kernel could not (helpers, globals that are not constexpr, `.handle`), and, for float32
tasks, IEEE fp32 dots.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from orchestrator.verify.static import policy as sp
from orchestrator.verify.static.targets import is_object
from orchestrator.verify.static.values import DATA, KernelValue, MemberValue, ModuleValue, UserValue

if TYPE_CHECKING:
    from orchestrator.verify.static.gate import Gate

TF32_MESSAGE = (
    'tl.dot on a float32 task without input_precision="ieee": the Triton interpreter cannot see TF32 (it'
    " computes the dot in full fp32), while a GPU uses TF32 by default and is off by ~1e-3 relative, so the"
    ' cpu pool would pass a kernel that fails on the device. Write tl.dot(a, b, input_precision="ieee").'
)
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


class KernelRules:
    def __init__(self, gate: Gate) -> None:
        self.g = gate
        self.fp32 = "float32" in gate.dtypes

    def check(self, node: ast.AST) -> None:
        g = self.g
        if isinstance(node, _NESTED):
            g.flag(
                "non_triton_in_kernel",
                node,
                "a function, lambda or class inside a kernel runs as host Python",
            )
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            self._name(node)
        elif isinstance(node, ast.Attribute):
            base = g.values(node.value)
            plain = DATA in base and not any(
                isinstance(v, ModuleValue | MemberValue | KernelValue) for v in base
            )
            if plain and node.attr not in sp.KERNEL_VALUE_ATTRS:
                g.flag("non_triton_in_kernel", node, f".{node.attr} is not an attribute of Triton values")
        elif isinstance(node, ast.Call) and self.fp32:
            if any(isinstance(v, MemberValue) and is_object(v, sp.TRITON_DOT) for v in g.values(node.func)):
                self._dot(node)

    def _name(self, node: ast.Name) -> None:
        g = self.g
        values = g.values(node)
        for value in values:
            if isinstance(value, UserValue):
                g.flag("non_triton_in_kernel", node, f"plain Python helper {node.id} called in a kernel")
        if DATA not in values:
            return
        owner = g.resolver.defining_scope(node.id, g.resolver.scope_of.get(id(node), g.resolver.module_scope))
        if owner is not g.resolver.module_scope:
            return  # a local of the kernel
        for source, _where in owner.bindings.get(node.id, []):
            if isinstance(source, ast.AST) and not self._constexpr(source):
                g.flag(
                    "non_triton_in_kernel",
                    node,
                    f"global {node.id} is not a constant or tl.constexpr (compiled kernels cannot read it)",
                )
                return

    def _constexpr(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, int | float | bool | str) or node.value is None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            return self._constexpr(node.operand)
        if isinstance(node, ast.Call):
            funcs = self.g.values(node.func)
            return bool(funcs) and all(
                isinstance(f, MemberValue) and is_object(f, "triton.language.constexpr") for f in funcs
            )
        return False

    def _dot(self, node: ast.Call) -> None:
        precision: ast.AST | None = node.args[3] if len(node.args) > 3 else None
        tf32_flag: ast.AST | None = node.args[4] if len(node.args) > 4 else None
        splat = any(isinstance(a, ast.Starred) for a in node.args)
        for keyword in node.keywords:
            if keyword.arg is None:
                splat = True
            elif keyword.arg == "input_precision":
                precision = keyword.value
            elif keyword.arg == "allow_tf32":
                tf32_flag = keyword.value
        ieee = isinstance(precision, ast.Constant) and precision.value == "ieee"
        no_flag = tf32_flag is None or (isinstance(tf32_flag, ast.Constant) and tf32_flag.value is None)
        if splat or not ieee or not no_flag:
            self.g.flag("tf32_dot", node, TF32_MESSAGE)
