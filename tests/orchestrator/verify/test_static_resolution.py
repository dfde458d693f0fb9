"""The static gate decides by resolved names: every attack reaches a banned object through an alias,
an attribute chain through allowed modules, or a dynamic lookup, and must be rejected with its rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.verify.policy import RULES
from orchestrator.verify.static.gate import check_file, check_source

STATIC_CHEATS = Path(__file__).resolve().parent / "cheats" / "static"

TEMPLATE = """
import dataclasses
import enum
import functools
import os
import typing

import torch
import triton
import triton.language as tl
{imports}

@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

{module}

def add(x, y):
    out = torch.empty_like(x)
{body}
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
"""


def candidate(body: str = "", module: str = "", imports: str = "") -> str:
    indented = "".join(f"    {line}\n" for line in body.splitlines())
    return TEMPLATE.format(imports=imports, module=module, body=indented)


def rules(source: str, entry: str = "add") -> set[str]:
    found = {v.rule for v in check_source(source, entry).violations}
    assert found <= set(RULES), found - set(RULES)
    return found


def test_template_is_clean() -> None:
    assert rules(candidate()) == set()


# (entry body, expected rule): objects reached through chains of allowed modules and aliases.
ENTRY_ATTACKS = [
    ('os.path.os.popen("true")', "process_control"),
    ('os.path.os.system("true")', "process_control"),
    ("m = os.path.sys.modules", "monitor_tampering"),
    ('p = os.path\np.os.system("true")', "process_control"),
    ('q = os.path.os\nr = q\nr.execv("/bin/true", ["true"])', "process_control"),
    ('(o := os.path).os.system("true")', "process_control"),
    ("a, b = os.path, 0\na.os.kill(0, 0)", "process_control"),
    ('[a, (b, c)] = [1, (os.path.os, 2)]\nb.system("true")', "process_control"),
    ('typing.sys.modules["torch"]', "monitor_tampering"),
    ('dataclasses.builtins.exec("1")', "dynamic_code"),
    ('enum.bltns.eval("1")', "dynamic_code"),
    ('tl.core.builtins.open("/tmp/x", "w")', "file_io"),
    ("f = tl.core.inspect.currentframe()", "introspection"),
    ('typing.operator.attrgetter("path.os")(os)', "dynamic_name"),
    ('functools.partial(getattr, os)("system")', "dynamic_name"),
    ('g = getattr\ng(os, "system")("true")', "dynamic_name"),
    ('getattr(os, "sys" if x.numel() else "path")', "dynamic_name"),
    ('getattr(getattr(os, "path"), "os").system("true")', "process_control"),
    ('getattr(x, "__class__")', "introspection"),
    ('hasattr(x, "ad" + "d")', "dynamic_name"),
    ('vars(os)["system"]("true")', "dynamic_name"),
    ('globals()["os"].system("true")', "dynamic_name"),
    ('locals()["x"]', "dynamic_name"),
    ('os.__dict__["system"]("true")', "introspection"),
    ('__builtins__["eval"]("1")', "introspection"),
    ('object.__getattribute__(os, "system")("true")', "introspection"),
    ('type("T", (object,), {"f": lambda self: 0})', "dynamic_code"),
    ('"{0.__class__.__mro__}".format(x)', "dynamic_name"),
    ('"{t.shape}".format_map({"t": x})', "dynamic_name"),
    ('fmt = "{0.T}"\nfmt.format(x)', "dynamic_name"),
    ('[m.system("true") for m in [os]]', "dynamic_name"),
    ('(os if x.numel() else typing).system("true")', "dynamic_name"),
    ('{"m": os}["m"].system("true")', "dynamic_name"),
    ("print(os)", "dynamic_name"),
    ("match os.path:\n    case object(os=o):\n        o.system('true')", "dynamic_name"),
    ("match x:\n    case object(__class__=c):\n        pass", "introspection"),
    ('torch.os.system("true")', "process_control"),
    ("torch.sys.setprofile(None)", "monitor_tampering"),
    ('torch.importlib.import_module("subprocess")', "dynamic_code"),
    ("torch.functional.torch._C._DisableTorchDispatch()", "monitor_tampering"),
    ('torch.builtins.getattr(torch, "ad" + "d")', "dynamic_name"),
    ('dataclasses.builtins.getattr(torch, "add")(x, y)', "torch_compute"),
    ("s = collections_sys = dataclasses.sys", "introspection"),
    ("_mystery.system('true')", "dynamic_name"),
    ("_add_kernel.fn(x, y, out, 1, 1)", "runtime_internals"),
    ("_add_kernel.cache.clear()", "runtime_internals"),
    ("k = _add_kernel\nk.run(x, y, out, 1, 1, grid=(1,), warmup=False)", "runtime_internals"),
    ("x.__class__ = torch.Tensor", "monitor_tampering"),
    ('setattr(torch, "allclose", None)', "introspection"),
    ("out._base", "runtime_internals"),
    ("h = typing.ForwardRef(\"__import__('os')\")", "dynamic_name"),
    ("from typing import sys as s2", "introspection"),
    ("import os.path as osp2\nosp2.os.popen('true')", "process_control"),
    ("from os import path as p2\np2.os.system('true')", "process_control"),
    ("from os.path import os as o2\no2.system('true')", "process_control"),
    ("super()", "introspection"),
    ("id(x)", "introspection"),
]


@pytest.mark.parametrize(
    ("body", "rule"), ENTRY_ATTACKS, ids=[b.splitlines()[0][:50] for b, _ in ENTRY_ATTACKS]
)
def test_entry_attack_rejected(body: str, rule: str) -> None:
    assert rule in rules(candidate(body=body))


# (module-level code, expected rule).
MODULE_ATTACKS = [
    ("def _run(cmd, _o=os.path):\n    return _o.os.popen(cmd)\n", "process_control"),
    ("_h = lambda o=os: o.popen('true')\n", "process_control"),
    (
        "_M = None\n\n\ndef _set():\n    global _M\n    _M = os.path.os\n\n\ndef _use():\n   "
        " _M.system('true')\n",
        "process_control",
    ),
    (
        "def _outer():\n    m = os\n\n    def inner():\n        return m.system('true')\n\n    return"
        " inner\n",
        "process_control",
    ),
    (
        "def _outer():\n    m = None\n\n    def inner():\n        nonlocal m\n        m = os.path.os\n\n"
        "    inner()\n    m.system('true')\n",
        "process_control",
    ),
    ("class _Box:\n    mod = os\n\n\n_Box.mod.system('true')\n", "dynamic_name"),
    ("def _f():\n    return 0\n\n\n_f.m = os\n", "dynamic_name"),
    ("def _get():\n    return os\n\n\n_get().system('true')\n", "dynamic_name"),
    ("def _hint(v: 'os.system'):\n    return v\n\n\n_H = typing.get_type_hints(_hint)\n", "dynamic_name"),
    ("from os.path import *\n", "dynamic_name"),
    ("class _T(torch.Tensor):\n    pass\n", "runtime_internals"),
    ("class _S:\n    def __index__(self):\n        return 0\n", "introspection"),
    ("class _E:\n    def __exit__(self, *a):\n        return True\n", "introspection"),
    ("class _Meta(type):\n    pass\n\n\nclass _C(metaclass=_Meta):\n    pass\n", "dynamic_name"),
    ("def __getattr__(name):\n    return os\n", "introspection"),
    ("__getattr__ = None\n", "introspection"),
    ("_F = __file__\n", "environment_probe"),
    ("_L = __loader__\n", "introspection"),
    ("def _swap(fn):\n    return fn\n\n\n@_swap\ndef _helper():\n    return 0\n", "decorator"),
    ("@functools.wraps(print)\ndef _w():\n    return 0\n", "decorator"),
    (
        "_k2 = triton.jit\n\n\n@_k2(do_not_specialize=[os.getpid()])\ndef _kk(x_ptr):\n    pass\n",
        "environment_probe",
    ),
]


@pytest.mark.parametrize(
    ("module", "rule"), MODULE_ATTACKS, ids=[m.splitlines()[0][:50] for m, _ in MODULE_ATTACKS]
)
def test_module_attack_rejected(module: str, rule: str) -> None:
    assert rule in rules(candidate(module=module))


def test_rebinding_the_entry_or_a_kernel_is_rejected() -> None:
    assert "dynamic_name" in rules(candidate(module="") + "\n\nadd = print\n")
    assert "dynamic_name" in rules(candidate(module="") + "\n\n_add_kernel = {(1,): print}\n")
    assert "dynamic_name" in rules(candidate(module="def _g():\n    global add\n    add = None\n"))


def test_resolution_is_reported_with_the_final_target() -> None:
    (violation,) = [v for v in check_source(candidate(body='os.path.os.popen("true")'), "add").violations]
    assert violation.rule == "process_control"
    assert "os.popen" in violation.message


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("os_path_popen.py", {"process_control"}),
        ("alias_chain_system.py", {"process_control"}),
        ("typing_sys_modules.py", {"monitor_tampering"}),
        ("builtins_through_modules.py", {"dynamic_code", "dynamic_name"}),
        ("dynamic_lookup.py", {"dynamic_name"}),
        ("disable_dispatch.py", {"monitor_tampering"}),
        ("profile_hook.py", {"monitor_tampering"}),
        ("torch_function_class.py", {"monitor_tampering"}),
        ("decorator_swap.py", {"decorator"}),
        ("rebound_entry.py", {"dynamic_name"}),
        ("cached_entry.py", {"decorator"}),
    ],
)
def test_static_cheat_files_rejected(name: str, expected: set[str]) -> None:
    found = {v.rule for v in check_file(STATIC_CHEATS / name, "add").violations}
    assert expected <= found, found
