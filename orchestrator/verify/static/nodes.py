"""Per-node rules of the static gate that are not about which object a name reaches: imports,
attribute names (dunders, frames, private names, tensor methods), stores into modules and objects,
format strings, dunder names, decorators, and what classes may be.
"""

from __future__ import annotations

import ast
import string
from typing import TYPE_CHECKING

from orchestrator.verify import policy
from orchestrator.verify.static import policy as sp
from orchestrator.verify.static.launches import launch_kernel
from orchestrator.verify.static.names import constant_attr_name
from orchestrator.verify.static.targets import _is_dunder, kernel_allows, member_rule, module_rule, store_rule
from orchestrator.verify.static.values import (
    DATA,
    KernelValue,
    MemberValue,
    ModuleValue,
    UserValue,
    Value,
    module_value,
    step,
)

if TYPE_CHECKING:
    from orchestrator.verify.static.gate import Gate

_TORCH_HOOKS = frozenset({"__torch_function__", "__torch_dispatch__"})
_RESOLVED = (ModuleValue, MemberValue)


class NodeRules:
    def __init__(self, gate: Gate) -> None:
        self.g = gate

    def check(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            self.imports(node)
        elif isinstance(node, ast.Attribute):
            self.attribute(node)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
            self.store(node)
        elif isinstance(node, ast.Name):
            self.name(node)
        elif isinstance(node, ast.Call):
            self.call(node)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self.function(node)
        elif isinstance(node, ast.ClassDef):
            self.klass(node)
        elif isinstance(node, ast.MatchClass):
            for attr in node.kwd_attrs:
                self.attr_name(attr, node, frozenset({DATA}), load=True)
        elif isinstance(node, ast.Await | ast.AsyncFor | ast.AsyncWith):
            self.g.flag("threads", node, "async code (coroutines run outside the call the harness observes)")
        elif isinstance(node, ast.Constant) and node.value in ("bf16", "bfloat16"):
            self.g.feature("bf16", node, "bfloat16 arithmetic")

    # --- imports --------------------------------------------------------------------------------
    def imports(self, node: ast.Import | ast.ImportFrom) -> None:
        g = self.g
        if isinstance(node, ast.ImportFrom) and node.level:
            g.flag("forbidden_import", node, "relative imports are not allowed")
            return
        scope = g.resolver.scope_of.get(id(node))
        if scope is not None and scope.kind == "class":
            g.flag("dynamic_name", node, "an import in a class body makes a module a class attribute")
        if isinstance(node, ast.Import):
            for alias in node.names:
                self._module(node, alias.name)
            return
        module = node.module or ""
        self._module(node, module)
        base = module_value(module)
        for alias in node.names:
            if alias.name == "*":
                g.flag("dynamic_name", node, f"from {module} import *: the names it binds cannot be resolved")
                continue
            value = step(base, alias.name)
            if "libdevice" in f"{module}.{alias.name}":
                g.feature("libdevice", node, f"import of {module}.{alias.name}")
            if isinstance(value, ModuleValue):
                self._module(node, value.name, written=f"{module}.{alias.name}")
            elif isinstance(value, MemberValue) and not kernel_allows(value):
                finding = member_rule(value, call=False)
                if finding is not None:
                    g.flag(finding.rule, node, f"import of {value.display}: {finding.message}")

    def _module(self, node: ast.AST, dotted: str, written: str = "") -> None:
        value = module_value(dotted)
        finding = module_rule(value if isinstance(value, ModuleValue) else ModuleValue(dotted))
        if finding is not None:
            seen = f" (imported as {written})" if written and written != dotted else ""
            self.g.flag(finding.rule, node, f"import of {dotted}{seen}: {finding.message}")
        if "libdevice" in dotted:
            self.g.feature("libdevice", node, f"import of {dotted}")

    # --- attributes and stores ------------------------------------------------------------------
    def attribute(self, node: ast.Attribute) -> None:
        base = self.g.values(node.value)
        self.attr_name(node.attr, node, base, load=isinstance(node.ctx, ast.Load), obj=node.value)
        if isinstance(node.ctx, ast.Store | ast.Del):
            self.store(node)
        if node.attr == "libdevice":
            self.g.feature("libdevice", node, "libdevice call")
        if node.attr == "inline_asm_elementwise":
            self.g.feature("inline_asm", node, "tl.inline_asm_elementwise")
        if node.attr == "bfloat16":
            self.g.feature("bf16", node, "bfloat16 arithmetic")

    def attr_name(
        self, attr: str, node: ast.AST, base: frozenset[Value], *, load: bool, obj: ast.AST | None = None
    ) -> None:
        """Rules on an attribute *name*, whatever object it is read from."""
        g = self.g
        if _is_dunder(attr) and attr not in policy.DUNDER_ALLOW:
            if attr in _TORCH_HOOKS or (attr == "__class__" and not load):
                g.flag("monitor_tampering", node, f"access to .{attr}: it redirects the harness' dispatch")
            else:
                g.flag("introspection", node, f"access to .{attr}")
            return
        if attr in sp.ALWAYS_DENIED_ATTRS:
            g.flag("non_triton_in_kernel", node, f".{attr}: the interpreter's raw array, not a Triton value")
            return
        if attr in sp.FRAME_ATTRS or attr in policy.DUNDER_INTROSPECTION:
            g.flag("introspection", node, f"access to .{attr} (frame, code or traceback internals)")
            return
        if any(isinstance(v, KernelValue) for v in base):
            g.flag(
                "runtime_internals",
                node,
                f"attribute .{attr} of a kernel: launch kernels as kernel[grid](...)",
            )
            return
        if any(isinstance(v, _RESOLVED) for v in base):
            return  # a chain through a module: judged by its resolved target
        self_like = isinstance(obj, ast.Name) and obj.id in ("self", "cls")
        if attr.startswith("_") and not self_like:
            g.flag("runtime_internals", node, f"access to private attribute .{attr}")
            return
        constant = isinstance(obj, ast.Constant | ast.JoinedStr)
        if not load or constant or g.in_kernel(node) or DATA not in base:
            return
        if attr in sp.TENSOR_HOST_ESCAPE_METHODS:
            g.flag("host_compute", node, f".{attr}: moves tensor data to the host, out of the op trace")
        elif attr in sp.TENSOR_FINGERPRINT_METHODS:
            g.flag("environment_probe", node, f".{attr}: a buffer address tells a test from production")
        elif attr in policy.TENSOR_COMPUTE_METHODS and self._called(node):
            # A call by a tensor method's name; a bare reference (`f = x.add`) is judged where the
            # base is known to be a tensor (static.tensors): `device.type` or `iinfo(...).max` are not.
            g.flag("torch_compute", node, f"tensor method .{attr}()")

    def _called(self, node: ast.AST) -> bool:
        parent = self.g.parents.get(id(node))
        return isinstance(parent, ast.Call) and parent.func is node

    def store(self, node: ast.Attribute | ast.Subscript) -> None:
        written = ast.unparse(node)[:80]
        for value in self.g.values(node.value):
            if isinstance(value, _RESOLVED):
                finding = store_rule(value, written)
                self.g.flag(finding.rule, node, finding.message)
            if isinstance(value, ModuleValue):  # the module itself may be off limits too (torch.testing)
                own = module_rule(value)
                if own is not None:
                    self.g.flag(own.rule, node, own.message)
            elif isinstance(value, KernelValue):
                self.g.flag("monkeypatch", node, f"assignment into kernel {value.name}: {written}")

    def name(self, node: ast.Name) -> None:
        ident = node.id
        if not _is_dunder(ident):
            return
        if isinstance(node.ctx, ast.Load):
            if ident in sp.READABLE_DUNDER_NAMES:
                return
            rule = sp.DUNDER_NAME_RULES.get(ident, "introspection")
            self.g.flag(rule, node, f"access to {ident}")
        elif ident not in sp.BINDABLE_DUNDERS:
            self.g.flag("introspection", node, f"binding {ident} changes how Python looks names up")

    # --- calls ----------------------------------------------------------------------------------
    def call(self, node: ast.Call) -> None:
        g = self.g
        funcs = g.values(node.func)
        if MemberValue("builtins", ("type",)) in funcs and len(node.args) != 1:
            g.flag("dynamic_code", node, "type() with three arguments creates a class at runtime")
        torch_call = any(isinstance(v, MemberValue) and v.display.startswith("torch.") for v in funcs)
        if torch_call and any(k.arg == "out" for k in node.keywords):
            g.flag("torch_compute", node, "out= makes an allowed torch call write into an existing tensor")
        if _copies_a_view(node):
            message = "a view made contiguous (or reshaped) is a copy by torch that does the layout work"
            g.flag("torch_compute", node, message)
        if launch_kernel(g, node) is not None:
            for arg in (*node.args, *(k.value for k in node.keywords)):
                if any(isinstance(v, UserValue) for v in g.values(arg)):
                    message = "a Python function or class passed into a kernel runs as host code"
                    g.flag("non_triton_in_kernel", node, message)
        if id(node) in g.lookups:
            name = constant_attr_name(node) or ""
            self.attr_name(name, node, g.values(node.args[0]), load=True, obj=node.args[0])
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in sp.FORMAT_METHODS:
            if any(isinstance(v, _RESOLVED) for v in g.values(func.value)):
                return
            if func.attr == "format_map":
                g.flag("dynamic_name", node, "str.format_map looks fields up by name at runtime")
            elif not (isinstance(func.value, ast.Constant) and isinstance(func.value.value, str)):
                g.flag("dynamic_name", node, "str.format on a string that is not a literal")
            elif _format_reads_attributes(func.value.value):
                g.flag("dynamic_name", node, "a format string that reads attributes or items ({0.x}, {0[k]})")

    # --- definitions ----------------------------------------------------------------------------
    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        g = self.g
        parent = g.parents.get(id(node))
        if isinstance(node, ast.AsyncFunctionDef):
            g.flag("threads", node, f"async def {node.name}")
        if _is_dunder(node.name):
            if isinstance(parent, ast.ClassDef) and node.name in _TORCH_HOOKS:
                g.flag("monitor_tampering", node, f"a class defining {node.name} intercepts torch calls")
            elif not (isinstance(parent, ast.ClassDef) and node.name in sp.CLASS_DUNDER_METHODS):
                g.flag(
                    "introspection", node, f"defining {node.name} adds implicit calls the gate cannot follow"
                )
        allowed = set(sp.HOST_DECORATORS)
        if isinstance(parent, ast.Module):
            allowed |= sp.TRITON_KERNEL_DECORATORS
        if isinstance(parent, ast.ClassDef):
            allowed |= sp.METHOD_DECORATORS
        for decorator in node.decorator_list:
            self._decorator(decorator, allowed, node.name)

    def _decorator(self, decorator: ast.AST, allowed: set[str] | frozenset[str], name: str) -> None:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        for value in self.g.values(target):
            shown = value.display if isinstance(value, _RESOLVED) else ast.unparse(target)
            if not (isinstance(value, MemberValue) and value.display in allowed):
                self.g.flag("decorator", decorator, f"@{shown} on {name}: it decides what {name} is bound to")

    def klass(self, node: ast.ClassDef) -> None:
        g = self.g
        for decorator in node.decorator_list:
            self._decorator(decorator, sp.CLASS_DECORATORS, node.name)
        if node.keywords:
            g.flag("dynamic_name", node, f"class {node.name}: metaclass and class keywords are not allowed")
        for stmt in node.body:  # an instance passed into a kernel would run these there, as host code
            if isinstance(stmt, ast.FunctionDef) and stmt.name in sp.KERNEL_VALUE_ATTRS:
                message = (
                    f"method {node.name}.{stmt.name} has the name of a Triton value's attribute: an instance"
                    " passed to a kernel would run it as host code"
                )
                g.flag("non_triton_in_kernel", stmt, message)
        for base in node.bases:
            for value in g.values(base):
                if isinstance(value, UserValue):
                    continue
                if isinstance(value, MemberValue) and value.display in sp.CLASS_BASES:
                    continue
                shown = value.display if isinstance(value, _RESOLVED) else ast.unparse(base)
                finding = member_rule(value, call=False) if isinstance(value, MemberValue) else None
                if finding is not None and finding.rule == "monitor_tampering":
                    g.flag(finding.rule, node, f"class {node.name} derived from {shown}: {finding.message}")
                elif shown.startswith(("torch", "triton")):
                    g.flag("runtime_internals", node, f"class derived from {shown}")
                else:
                    g.flag(
                        "dynamic_name",
                        node,
                        f"class derived from {shown}: only plain classes, dataclasses, enums, named tuples"
                        " and exceptions",
                    )


_VIEW_MAKERS = frozenset("t transpose permute expand expand_as mT T H mH unfold diagonal narrow".split())
_COPYING = frozenset("contiguous reshape flatten".split())


def _copies_a_view(node: ast.Call) -> bool:
    """x.t().contiguous(), x.permute(...).reshape(...), x[::2].contiguous(): a gather done by torch."""
    func = node.func
    if not (isinstance(func, ast.Attribute) and func.attr in _COPYING):
        return False
    base = func.value
    if isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute):
        return base.func.attr in _VIEW_MAKERS
    if isinstance(base, ast.Attribute):
        return base.attr in _VIEW_MAKERS
    return isinstance(base, ast.Subscript) and any(isinstance(n, ast.Slice) for n in ast.walk(base.slice))


def _format_reads_attributes(text: str) -> bool:
    try:
        fields = [f for _, f, spec, _ in string.Formatter().parse(text) if f is not None]
        specs = [spec for _, f, spec, _ in string.Formatter().parse(text) if spec]
    except ValueError:
        return True
    nested = any(_format_reads_attributes(spec) for spec in specs)
    return nested or any("." in f or "[" in f for f in fields)
