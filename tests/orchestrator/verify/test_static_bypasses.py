"""Bypasses of the resolver itself (found by attacking it): the file decoded differently than the gate
read it, modules carried by annotations, `type(x)` as a constructor, Python callables smuggled into a
kernel, launch hooks built by a function, tensor indices hidden in slices, and inputs built to crash
or exhaust the gate."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.verify.policy import RULES
from orchestrator.verify.static.gate import check_file, check_source

STATIC_CHEATS = Path(__file__).resolve().parent / "cheats" / "static"

TEMPLATE = """
import dataclasses
import os

import torch
import triton
import triton.language as tl


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


def candidate(body: str = "", module: str = "") -> str:
    return TEMPLATE.format(module=module, body="".join(f"    {line}\n" for line in body.splitlines()))


def rules(source: str) -> set[str]:
    found = {v.rule for v in check_source(source, "add").violations}
    assert found <= set(RULES), found - set(RULES)
    return found


def test_template_is_clean() -> None:
    assert rules(candidate()) == set()


def test_utf7_source_hiding_a_line_in_a_comment() -> None:
    report = check_file(STATIC_CHEATS / "utf7_hidden_line.py", "add")
    assert [v.rule for v in report.violations] == ["dynamic_code"]
    assert "utf-7" in report.violations[0].message


@pytest.mark.parametrize(
    "cookie", ["# coding: latin-1", "#!/usr/bin/env python\n# vim: set fileencoding=cp1252 :"]
)
def test_any_non_utf8_encoding_declaration_is_rejected(cookie: str) -> None:
    assert rules(cookie + "\n" + candidate()) == {"dynamic_code"}


@pytest.mark.parametrize("cookie", ["# -*- coding: utf-8 -*-", "# coding=UTF8"])
def test_utf8_declarations_are_fine(cookie: str) -> None:
    assert rules(cookie + "\n" + candidate()) == set()


@pytest.mark.parametrize(
    ("module", "body", "rule"),
    [
        # An annotation is evaluated at definition time and kept: dataclasses.fields() hands it back.
        (
            "@dataclasses.dataclass\nclass _C:\n    m: os = None\n",
            "dataclasses.fields(_C)[0].type.system('true')",
            "dynamic_name",
        ),
        ("def _f(v: os.system = None):\n    return v\n", "", "process_control"),
        ("def _f() -> torch.add:\n    return None\n", "", "torch_compute"),
        # type(x) is torch.Tensor: calling it constructs tensors from host data.
        ("", "t = type(x)([1.0, 2.0])", "introspection"),
        # A plain Python function passed as a constexpr runs as host code inside the interpreted kernel.
        (
            "def _host(v):\n    return v\n",
            "_add_kernel[(1,)](x, y, out, x.numel(), BLOCK=256, HOOK=_host)",
            "non_triton_in_kernel",
        ),
        # A helper handed an interpreter tensor reaches its numpy array through .handle.
        ("def _peek(v):\n    return v.handle.data\n", "", "non_triton_in_kernel"),
        ("", "v = out[: x[0]]", "torch_compute"),
        ("", "v = out[0 : 2, x]", "torch_compute"),
        ("", "n = range(x[0])", "torch_compute"),
        ("", "s = '%s' % x", "torch_compute"),
        ("", "s = format(x, '.3f')", "host_compute"),
        ("", "s = sum([x, y])", "torch_compute"),
        # Allowed calls that still do the work: writing into an input, layout copies by torch.
        ("", "torch.zeros(x.shape, out=x)", "torch_compute"),
        ("", "o = x.t().contiguous()", "torch_compute"),
        ("", "o = x.permute(1, 0).reshape(-1)", "torch_compute"),
        ("", "o = x.T.contiguous()", "torch_compute"),
        ("", "o = x[::2].contiguous()", "torch_compute"),
        ("", "o = x.expand(4, -1).contiguous()", "torch_compute"),
        ("", "raise SystemExit(0)", "process_control"),
        ("", "s = max(v for v in (x, y))", "torch_compute"),
        ("", "c = {}\nv = c[x]", "torch_compute"),
        ("_G = {}\n", "_G[0] = os\n", "dynamic_name"),
        ("", "[(m := os) for _ in range(1)]\nm.system('true')", "process_control"),
        ("class _E(Exception):\n    pass\n", "raise _E(os)", "dynamic_name"),
        ("", "f = lambda o=os: o\nf().system('true')", "dynamic_name"),
        ("class _Holder:\n    import os as o\n", "_Holder().o.system('true')", "dynamic_name"),
        ("class _Holder:\n    from os import path\n", "_Holder.path.os.system('true')", "dynamic_name"),
        ("", "match 1:\n    case os.path.os.system:\n        pass", "process_control"),
    ],
)
def test_resolver_bypasses_rejected(module: str, body: str, rule: str) -> None:
    assert rule in rules(candidate(module=module, body=body))


def test_config_hooks_built_by_a_function_are_launch_code() -> None:
    module = (
        "def _hook(nargs):\n    nargs['out_ptr'][:] = nargs['x_ptr'] + nargs['y_ptr']\n\n\n"
        "def _configs():\n    return [triton.Config({'BLOCK': 64}, pre_hook=_hook)]\n\n\n"
        "@triton.autotune(configs=_configs(), key=['n'])\n@triton.jit\n"
        "def _tuned(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    pass\n"
    )
    source = candidate(module=module)
    lines = {source.splitlines()[v.line - 1].strip() for v in check_source(source, "add").violations}
    assert "nargs['out_ptr'][:] = nargs['x_ptr'] + nargs['y_ptr']" in lines


@pytest.mark.parametrize(
    ("module", "body"),
    [
        # A tensor handed to a constexpr parameter reaches the interpreted kernel body as a torch tensor.
        ("", "_two[(1,)](x, out, x.numel(), T=x, BLOCK=256)"),
        # The kernel calls its parameter: a partial of a host function, a bound method, a lambda.
        ("import functools\n\n\ndef _host(v):\n    return v\n", "_call[(1,)](x, F=functools.partial(_host))"),
        ("", "_call[(1,)](x, F=[print][0])"),
        ("", "_call[(1,)](x)"),
        # An object whose method shares a name with a Triton value attribute stands in for one.
        (
            "class _Fake:\n    def to(self, dtype):\n        return 0\n",
            "_two[(1,)](x, out, x.numel(), T=0, BLOCK=256)",
        ),
    ],
)
def test_host_objects_passed_into_kernels_are_rejected(module: str, body: str) -> None:
    kernels = (
        "@triton.jit\ndef _two(x_ptr, out_ptr, n, T: tl.constexpr, BLOCK: tl.constexpr):\n    pass\n\n\n"
        "@triton.jit\ndef _call(x_ptr, F: tl.constexpr):\n    F(x_ptr)\n"
    )
    assert "non_triton_in_kernel" in rules(candidate(module=kernels + module, body=body))


def test_jit_functions_as_constexpr_arguments_are_fine() -> None:
    module = "@triton.jit\ndef _relu(v):\n    return tl.maximum(v, 0.0)\n"
    body = "_add_kernel[(1,)](x, y, out, x.numel(), BLOCK=256, ACT=_relu)"
    assert rules(candidate(module=module, body=body)) == set()
    called = "@triton.jit\ndef _apply(x_ptr, F: tl.constexpr):\n    tl.store(x_ptr, F(tl.load(x_ptr)))\n"
    assert rules(candidate(module=module + "\n\n" + called, body="_apply[(1,)](out, F=_relu)")) == set()


@pytest.mark.parametrize(
    "body",
    [
        "v = " + " + ".join(["1"] * 3000),
        "v = x" + ".T" * 3000,
        "v = " + "(" * 150 + "1" + ")" * 150,
    ],
)
def test_pathological_sources_are_answered_not_crashed(body: str) -> None:
    report = check_source(candidate(body=body), "add")
    assert isinstance(report.ok, bool)  # a report (possibly a violation), never an exception


def test_null_bytes_are_a_syntax_error() -> None:
    assert rules(candidate() + "\x00") == {"syntax_error"}
