"""Property tests: whatever the route (attribute chains through allowed modules, import aliases,
assignment aliases, getattr with constants, defaults, closures, globals) and wherever it is placed
(entry, helper, module level, class body, heuristics, grid or autotune hook), a banned object is
rejected, and an allowed object reached the same ways passes.

The routes are found by walking the real module graph (what Python itself would reach), so the gate
is tested against the truth, not against its own resolver.
"""

from __future__ import annotations

import importlib
import types
import warnings
from collections import defaultdict
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.verify.static.gate import check_source

ALLOWED_ROOTS = ("os", "typing", "dataclasses", "enum", "collections", "functools", "torch", "triton", "math")


def _module_routes(max_depth: int = 3) -> dict[str, list[str]]:
    """Public attribute paths from the allowed roots to every module they reach."""
    with warnings.catch_warnings():  # some torch modules warn when their deprecated names are listed
        warnings.simplefilter("ignore")
        return _walk_routes(max_depth)


def _walk_routes(max_depth: int) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for root in ALLOWED_ROOTS:
        frontier = [(root, importlib.import_module(root))]
        found[frontier[0][1].__name__].append(root)
        for _ in range(max_depth):
            following = []
            for path, module in frontier:
                for name, value in list(vars(module).items()):
                    if name.startswith("_") or not isinstance(value, types.ModuleType):
                        continue
                    found[value.__name__].append(f"{path}.{name}")
                    following.append((f"{path}.{name}", value))
            frontier = following
    return {k: sorted(v, key=lambda p: (len(p), p))[:12] for k, v in found.items()}


ROUTES = _module_routes()

# Banned final targets, by the module that holds them (an attribute chain, then a call or a read).
BANNED: dict[str, list[str]] = {
    "os": ["system('true')", "popen('true')", "execv('/bin/true', [])", "kill(0, 0)", "fork()", "remove('x')",
           "environ", "getenv('HOME')", "listdir('.')", "putenv('A', 'B')"],
    "sys": ["modules", "settrace(None)", "setprofile(None)", "exit(0)", "argv"],
    "subprocess": ["run(['true'])", "Popen(['true'])", "check_output(['true'])"],
    "socket": ["socket()", "create_connection(('127.0.0.1', 1))"],
    "ctypes": ["CDLL(None)", "memmove(0, 0, 0)", "string_at(0)"],
    "gc": ["get_objects()", "get_referrers(0)", "callbacks"],
    "inspect": ["currentframe()", "stack()", "getsource(print)"],
    "threading": ["Thread(target=print)", "setprofile(None)", "settrace(None)"],
    "builtins": ["eval('1')", "exec('1')", "open('x')", "compile('1', 'x', 'eval')", "vars()", "globals()"],
    "importlib": ["import_module('subprocess')", "reload(print)"],
    "operator": ["attrgetter('system')", "methodcaller('system', 'true')"],
    "torch": ["matmul(x, x)", "add(x, 1)", "Tensor.add(x, 1)", "nn.functional.relu(x)", "sum(x)",
              "manual_seed(0)", "_C._DisableTorchDispatch()", "_C._DisableTorchFunction()",
              "overrides.TorchFunctionMode", "set_default_device('cpu')", "compile(print)"],
    "torch.utils": ["_python_dispatch.TorchDispatchMode"],
}  # fmt: skip

# Allowed final targets (and the module their chain starts from).
ALLOWED: dict[str, list[str]] = {
    "posixpath": ["join('a', 'b')", "basename('a/b')", "splitext('a.b')"],
    "torch": [
        "empty_like(x)",
        "empty((4,), dtype=torch.float32)",
        "float32",
        "finfo(torch.float16).eps",
        "get_default_dtype()",  # was cuda.is_available(): device_conditioned now (test_static_device.py)
        "zeros_like(x)",
    ],
    "triton": ["cdiv(7, 2)", "next_power_of_2(7)"],
    "math": ["sqrt(4.0)", "ceil(2.5)", "log2(8)"],
}

TEMPLATE = """import dataclasses
import enum
import functools
import os
import typing
import collections
import math

import torch
import triton
import triton.language as tl
{imports}

x = None  # module-level snippets and helpers use `x` like the entry does

{module}

@triton.jit
def _k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

{kernel_decorated}

def add(x, y):
    out = torch.empty_like(x)
{body}
    _k[{grid}](x, out, x.numel(), BLOCK=256)
    return out
"""


@dataclass(frozen=True)
class Case:
    imports: str = ""
    module: str = ""
    body: str = ""
    grid: str = "(triton.cdiv(x.numel(), 256),)"
    kernel_decorated: str = ""

    def source(self) -> str:
        body = "".join(f"    {line}\n" for line in self.body.splitlines())
        return TEMPLATE.format(
            imports=self.imports,
            module=self.module,
            body=body,
            grid=self.grid,
            kernel_decorated=self.kernel_decorated,
        )


def _getattr_chain(chain: str) -> str:
    head, *rest = chain.split(".")
    expr = head
    for part in rest:
        expr = f'getattr({expr}, "{part}")'
    return expr


def _route_exprs(module: str) -> list[str]:
    """Ways to write an expression that evaluates to `module`, starting from the template's imports."""
    return [r for r in ROUTES.get(module, []) if r.split(".")[0] in ALLOWED_ROOTS]


@st.composite
def statement_forms(draw: st.DrawFn, chain: str, member: str, *, class_body: bool = True) -> Case:
    """`chain.member` through one alias form, used from one placement."""
    forms = {
        "direct": ("", f"{chain}.{member}"),
        "assign": ("", f"_a = {chain}\n_a.{member}"),
        "two_step": ("", f"_a = {chain}\n_b = _a\n_b.{member}"),
        "tuple": ("", f"_z, _a = 0, {chain}\n_a.{member}"),
        "walrus": ("", f"(_a := {chain}).{member}"),
        "getattr": ("", f"{_getattr_chain(chain)}.{member}"),
        "conditional": ("", f"_a = None\nif x.numel() > 0:\n    _a = {chain}\n_a.{member}"),
        "default_arg": (f"def _h(_a={chain}):\n    return _a.{member}\n", "_h()"),
        "lambda_default": ("", f"(lambda _a={chain}: _a.{member})()"),
        "closure": (f"def _outer():\n    _a = {chain}\n\n    def _in():\n        return _a.{member}\n\n"
                    "    return _in\n", "_outer()()"),
        "global": (f"_G = None\n\n\ndef _set():\n    global _G\n    _G = {chain}\n", f"_set()\n_G.{member}"),
        "module_alias": (f"_A = {chain}\n", f"_A.{member}"),
    }  # fmt: skip
    name = draw(st.sampled_from(sorted(forms)))
    module_code, use = forms[name]
    # A class attribute holding a module is itself rejected (class scopes are not resolved), so honest
    # cases are not placed in class bodies.
    placement = draw(st.sampled_from(["entry", "helper", "module"] + (["class_body"] if class_body else [])))
    if placement == "entry":
        return Case(module=module_code, body=use)
    indented = "".join(f"    {line}\n" for line in use.splitlines())
    if placement == "helper":
        return Case(module=module_code + f"\n\ndef _helper(x):\n{indented}")
    if placement == "class_body":
        return Case(module=module_code + f"\n\nclass _Holder:\n    x = None\n{indented}")
    return Case(module=module_code + "\n" + use + "\n")


@st.composite
def expression_forms(draw: st.DrawFn, chain: str, member: str) -> Case:
    """`chain.member` as one expression inside code that runs during a launch."""
    expr = draw(
        st.sampled_from(
            [f"{chain}.{member}", f"{_getattr_chain(chain)}.{member}", f"(_w := {chain}).{member}",
             f"(lambda _a={chain}: _a.{member})()"]
        )
    )  # fmt: skip
    placement = draw(st.sampled_from(["heuristics", "grid", "pre_hook", "prune"]))
    if placement == "grid":
        return Case(grid=f'lambda meta: ({expr}, triton.cdiv(meta["n"], meta["BLOCK"]))[1:]')
    decorated = {
        "heuristics": f'@triton.heuristics({{"FLAG": lambda args: ({expr}, 1)[1]}})',
        "pre_hook": f"@triton.autotune(configs=[triton.Config({{}}, pre_hook=lambda nargs: {expr})],"
        " key=['n'])",
        "prune": f"@triton.autotune(configs=[], key=['n'], prune_configs_by={{'early_config_prune': "
        f"lambda configs, nargs, **kw: ({expr}, configs)[1]}})",
    }[placement]
    kernel = (
        f"{decorated}\n@triton.jit\ndef _hooked(x_ptr, n, FLAG: tl.constexpr):\n    pass\n\n\n"
        "def _use_hooked(x):\n    _hooked[(1,)](x, x.numel())\n"
    )
    return Case(kernel_decorated=kernel)


@st.composite
def banned_cases(draw: st.DrawFn) -> Case:
    module = draw(st.sampled_from(sorted(BANNED)))
    member = draw(st.sampled_from(BANNED[module]))
    routes = _route_exprs(module)
    how = draw(
        st.sampled_from(["route", "import_as", "from_import"] if routes else ["import_as", "from_import"])
    )
    imports = ""
    if how == "route":
        chain = draw(st.sampled_from(routes))
    elif how == "import_as":
        imports, chain = f"import {module} as _mod", "_mod"
    else:
        parent, _, leaf = module.rpartition(".")
        first, _, rest = member.partition(".")
        if parent:
            imports, chain = f"from {parent} import {leaf} as _mod", "_mod"
        elif "(" not in first and rest:
            imports, chain, member = f"from {module} import {first} as _mod", "_mod", rest
        else:
            imports, chain = f"import {module} as _mod", "_mod"
    if draw(st.booleans()):
        case = draw(statement_forms(chain, member))
    else:
        case = draw(expression_forms(chain, member))
    return Case(imports=imports, module=case.module, body=case.body, grid=case.grid,
                kernel_decorated=case.kernel_decorated)  # fmt: skip


@st.composite
def honest_cases(draw: st.DrawFn) -> Case:
    module = draw(st.sampled_from(sorted(ALLOWED)))
    member = draw(st.sampled_from(ALLOWED[module]))
    routes = {"posixpath": ["os.path"], "torch": ["torch"], "triton": ["triton"], "math": ["math"]}[module]
    how = draw(st.sampled_from(["route", "import_as", "from_import"]))
    imports, chain = "", routes[0]
    if how == "import_as":
        real = "os.path" if module == "posixpath" else module
        imports, chain = f"import {real} as _mod", "_mod"
    elif how == "from_import" and module == "posixpath":
        imports, chain = "from os import path as _mod", "_mod"
    elif how == "from_import":
        first, _, rest = member.partition(".")
        if "(" not in first and rest:
            imports, chain, member = f"from {module} import {first} as _mod", "_mod", rest
    case = draw(statement_forms(chain, member, class_body=False))
    return Case(imports=imports, module=case.module, body=case.body)


IMPORTS_LINE = TEMPLATE.splitlines().index("{imports}") + 1


def _violations(case: Case) -> list[tuple[str, int]]:
    found = [(v.rule, v.line) for v in check_source(case.source(), "add").violations]
    assert not any(rule == "syntax_error" for rule, _ in found), case.source()
    return found


def test_the_templates_are_clean() -> None:
    assert _violations(Case()) == []
    assert all(
        _route_exprs(m) for m in ("os", "sys", "builtins", "inspect", "threading", "importlib", "ctypes")
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(banned_cases())
def test_banned_targets_are_rejected_whatever_the_route(case: Case) -> None:
    # Where the module is imported under an alias, the import alone is not enough: the use is reported.
    assert any(line > IMPORTS_LINE for _, line in _violations(case)), case.source()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(honest_cases())
def test_allowed_targets_pass_whatever_the_alias(case: Case) -> None:
    assert _violations(case) == [], case.source()


KERNEL_ALIASES = [
    ("import triton.language as lang", "lang"),
    ("from triton import language as lang", "lang"),
    ("import triton.language", "triton.language"),
    ("import triton as tr", "tr.language"),
]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(KERNEL_ALIASES), st.sampled_from(["load", "program_id", "arange", "store"]))
def test_triton_language_through_any_alias_is_fine_in_kernels(alias: tuple[str, str], _unused: str) -> None:
    imports, lang = alias
    source = f"""import torch
import triton
{imports}


@triton.jit
def _k(x_ptr, out_ptr, n, BLOCK: {lang}.constexpr):
    offs = {lang}.program_id(0) * BLOCK + {lang}.arange(0, BLOCK)
    {lang}.store(out_ptr + offs, {lang}.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def add(x, y):
    out = torch.empty_like(x)
    _k[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out
"""
    assert [v.rule for v in check_source(source, "add").violations] == []
