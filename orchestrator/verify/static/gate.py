"""Static gate: AST checks run on a candidate before it gets any device time.

Every name and attribute chain is first resolved to the object it reaches (``names``), and the
final target is judged (``targets``): ``os.path.join`` is allowed, ``os.path.os.popen`` is
``os.popen`` and process control. What cannot be resolved and could reach a module (a computed
getattr, a module passed around as a value, ``vars()``, a format string reading attributes) is
rejected. Code that runs inside a launch (decorator arguments, heuristics, autotune hooks, grid
callables) is host code like any other. Runtime checks in the child back this up, and the parent's
own comparison is the final word either way.
"""

from __future__ import annotations

import ast
import codecs
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.verify.static.devices import DeviceRules
from orchestrator.verify.static.kernels import KernelRules
from orchestrator.verify.static.launches import EntryRules, launch_callables, launch_kernel
from orchestrator.verify.static.names import Resolver, constant_attr_name
from orchestrator.verify.static.nodes import NodeRules
from orchestrator.verify.static.recursion import RecursionRules
from orchestrator.verify.static.targets import kernel_allows, member_rule, module_rule
from orchestrator.verify.static.tensors import TensorHeuristics, pointer_params
from orchestrator.verify.static.values import (
    KernelValue,
    MemberValue,
    ModuleValue,
    UnresolvedValue,
    Value,
)


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


def check_file(
    path: str | Path, entry: str, *, dtypes: Sequence[str] = (), device_queries: Sequence[str] = ()
) -> StaticReport:
    source = Path(path).read_text(encoding="utf-8")
    return check_source(source, entry, dtypes=dtypes, device_queries=device_queries)


def check_source(
    source: str, entry: str, *, dtypes: Sequence[str] = (), device_queries: Sequence[str] = ()
) -> StaticReport:
    """Check a candidate module; `dtypes` are the task's dtype names (they enable the TF32 rule),
    `device_queries` the device queries the task permits (task.py's DEVICE_QUERIES, by name)."""
    cookie = _foreign_encoding(source)
    if cookie is not None:
        message = (
            f"source encoding {cookie!r}: Python would decode the file differently than the gate read it"
        )
        return StaticReport((Violation("dynamic_code", 1, message),), (), ())
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return StaticReport((Violation("syntax_error", exc.lineno or 0, str(exc.msg)),), (), ())
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        return StaticReport((Violation("syntax_error", 0, f"cannot parse: {type(exc).__name__}"),), (), ())
    try:
        return Gate(tree, entry, tuple(dtypes), tuple(device_queries)).run()
    except RecursionError:
        return StaticReport((Violation("syntax_error", 0, "nested too deeply to check"),), (), ())


_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


def _foreign_encoding(source: str) -> str | None:
    """A PEP 263 encoding declaration other than UTF-8 (a UTF-7 file hides code in comments)."""
    for line in source.splitlines()[:2]:
        match = _CODING.match(line)
        if match:
            try:
                name = codecs.lookup(match.group(1)).name
            except LookupError:
                return match.group(1)
            return None if name in ("utf-8", "utf-8-sig") else match.group(1)
    return None


class Gate:
    """One run of the gate over one module: resolution first, then every rule family."""

    def __init__(
        self, tree: ast.Module, entry: str, dtypes: tuple[str, ...], device_queries: tuple[str, ...] = ()
    ) -> None:
        self.tree = tree
        self.entry = entry
        self.dtypes = dtypes
        self.device_queries = device_queries
        self.found: dict[tuple[str, int], Violation] = {}
        self.features: dict[tuple[str, int], Violation] = {}
        self.parents: dict[int, ast.AST] = {
            id(child): parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)
        }
        self.kernel_defs = self._find_kernels()
        self.resolver = Resolver(tree, frozenset(self.kernel_defs))
        self.kernel_nodes = {id(n) for k in self.kernel_defs.values() for s in k.body for n in ast.walk(s)}
        self.annotations = self._annotation_nodes()
        self.lookups = self._constant_lookups()

    # --- reporting ------------------------------------------------------------------------------
    def flag(self, rule: str, node: ast.AST, message: str) -> None:
        line = getattr(node, "lineno", 0)
        self.found.setdefault((rule, line), Violation(rule, line, message))

    def feature(self, name: str, node: ast.AST, message: str) -> None:
        line = getattr(node, "lineno", 0)
        self.features.setdefault((name, line), Violation(name, line, message))

    def in_kernel(self, node: ast.AST) -> bool:
        return id(node) in self.kernel_nodes

    def values(self, node: ast.AST) -> frozenset[Value]:
        return self.resolver.eval(node)

    # --- setup ----------------------------------------------------------------------------------
    def _find_kernels(self) -> dict[str, ast.FunctionDef]:
        """Module-level defs decorated with triton.jit (directly, or under autotune/heuristics)."""
        plain = Resolver(self.tree, frozenset())
        kernels: dict[str, ast.FunctionDef] = {}
        for stmt in self.tree.body:
            if isinstance(stmt, ast.FunctionDef) and any(
                self.decorator_targets(d, plain) & {"triton.jit"} for d in stmt.decorator_list
            ):
                kernels[stmt.name] = stmt
        return kernels

    @staticmethod
    def decorator_targets(decorator: ast.AST, resolver: Resolver) -> set[str]:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return {v.display for v in resolver.eval(target) if isinstance(v, MemberValue)}

    def _annotation_nodes(self) -> set[int]:
        roots: list[ast.AST] = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.arg) and node.annotation is not None:
                roots.append(node.annotation)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
                roots.append(node.returns)
            elif isinstance(node, ast.AnnAssign):
                roots.append(node.annotation)
        return {id(n) for root in roots for n in ast.walk(root) if not isinstance(n, ast.Call)}

    def _constant_lookups(self) -> set[int]:
        """getattr(x, "name") / hasattr(x, "name") calls (resolved like `x.name`)."""
        lookups = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and constant_attr_name(node) is not None:
                funcs = self.values(node.func)
                if funcs and funcs <= {
                    MemberValue("builtins", ("getattr",)),
                    MemberValue("builtins", ("hasattr",)),
                }:
                    lookups.add(id(node))
        return lookups

    # --- the run --------------------------------------------------------------------------------
    def run(self) -> StaticReport:
        nodes = NodeRules(self)
        kernels = KernelRules(self)
        for node in ast.walk(self.tree):
            self.check_reference(node)
            nodes.check(node)
            if self.in_kernel(node):
                kernels.check(node)
        host = [n for n in ast.walk(self.tree) if not self.in_kernel(n)]
        callables = launch_callables(self, {k: pointer_params(d) for k, d in self.kernel_defs.items()})
        launches = [(n, self.kernel_defs[k]) for n in host if (k := launch_kernel(self, n)) is not None]
        TensorHeuristics(self.resolver, host, callables, launches, self.flag).run()  # type: ignore[arg-type]
        EntryRules(self).run()
        DeviceRules(self, self.device_queries).run()
        RecursionRules(self).run()
        ordered = sorted(self.found.values(), key=lambda v: (v.line, v.rule))
        feats = sorted(self.features.values(), key=lambda v: (v.line, v.rule))
        return StaticReport(tuple(ordered), tuple(feats), tuple(sorted(self.kernel_defs)))

    # --- resolved references --------------------------------------------------------------------
    def position(self, node: ast.AST) -> str:
        """How a name/chain/lookup is used: base (of a longer chain), call, launch, tracked, ..."""
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return "base"
        if isinstance(parent, ast.Call):
            if id(parent) in self.lookups and parent.args and parent.args[0] is node:
                return "base"
            if parent.func is node:
                return "call"
        call = self.parents.get(id(parent)) if isinstance(parent, ast.keyword) else parent
        if isinstance(call, ast.Call) and call.func is not node and launch_kernel(self, call) is not None:
            return "launch_arg"  # a kernel passed to a kernel is a constexpr function argument
        if isinstance(parent, ast.Subscript) and parent.value is node:
            grand = self.parents.get(id(parent))
            if isinstance(grand, ast.Call) and grand.func is parent:
                return "launch"
        if id(node) in self.annotations:
            return "annotation"
        if id(node) in self.resolver.tracked:
            return "tracked"
        return "escape"

    def check_reference(self, node: ast.AST) -> None:
        is_chain = isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Load)
        if not (is_chain or id(node) in self.lookups):
            return
        where = self.position(node)
        if where == "base":
            return
        kernel = self.in_kernel(node)
        written = ast.unparse(node)[:80]
        for value in self.values(node):
            self.judge(value, node, where, kernel, written)

    def judge(self, value: Value, node: ast.AST, where: str, kernel: bool, written: str) -> None:
        if isinstance(value, UnresolvedValue):
            self.flag("dynamic_name", node, f"{written}: {value.reason}")
        elif isinstance(value, ModuleValue):
            self._judge_module(value, node, where, kernel, written)
        elif isinstance(value, MemberValue):
            self._judge_member(value, node, where, kernel, written)
        elif (
            isinstance(value, KernelValue) and not kernel and where not in ("launch", "tracked", "launch_arg")
        ):
            self.flag(
                "runtime_internals",
                node,
                f"kernel {value.name} used as a value: launch it as kernel[grid](...)",
            )
        self._features(value, node)

    def _judge_module(
        self, value: ModuleValue, node: ast.AST, where: str, kernel: bool, written: str
    ) -> None:
        finding = module_rule(value)
        seen = f" (written {written})" if written != value.display else ""
        if finding is not None:
            self.flag(finding.rule, node, finding.message + seen)
        elif where not in ("call", "tracked", "launch"):
            self.flag(
                "dynamic_name",
                node,
                f"module {value.display} used as a value{seen}: its uses are unresolvable",
            )
        if kernel and not kernel_allows(value):
            self.flag("non_triton_in_kernel", node, f"{value.display} used inside a kernel")

    def _judge_member(
        self, value: MemberValue, node: ast.AST, where: str, kernel: bool, written: str
    ) -> None:
        parent = self.parents.get(id(node))
        if where == "call" and parent is not None and id(parent) in self.lookups:
            return  # getattr(x, "const") is resolved as x.const
        language = value.display.startswith("triton.")
        if (kernel or (language and where in ("tracked", "annotation"))) and kernel_allows(value):
            return  # Triton names in kernels, and aliases or annotations of them anywhere
        # In a kernel, a Triton name that is not allowed is simply not Triton (host rules would
        # call it kernel code on the host).
        finding = None if kernel and language else member_rule(value, call=where == "call")
        shown = written.split("(")[0]
        same = shown in (value.display, value.display.removeprefix("builtins."))
        seen = "" if same else f" (written {written})"
        if finding is not None:
            self.flag(finding.rule, node, finding.message + seen)
        if kernel:
            self.flag("non_triton_in_kernel", node, f"{value.display} used inside a kernel (not Triton)")

    def _features(self, value: Value, node: ast.AST) -> None:
        if not isinstance(value, MemberValue | ModuleValue):
            return
        path = value.display
        if ".libdevice" in path or path.endswith("libdevice"):
            self.feature("libdevice", node, f"libdevice: {path}")
        if path.endswith("inline_asm_elementwise"):
            self.feature("inline_asm", node, "tl.inline_asm_elementwise")
        if path.endswith(".bfloat16"):
            self.feature("bf16", node, "bfloat16 arithmetic")
