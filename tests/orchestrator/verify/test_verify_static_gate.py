"""Static gate rules: each one fires on a minimal source and stays quiet on honest launchers."""

from __future__ import annotations

from pathlib import Path

import pytest
from verifykit import solution

from orchestrator.verify.policy import RULES
from orchestrator.verify.static.gate import check_file, check_source

HEADER = """
import torch
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
"""

LAUNCH = "    _k[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)\n"


def entry(body: str, header: str = HEADER) -> str:
    return header + "\n\ndef run(x):\n    out = torch.empty_like(x)\n" + LAUNCH + body + "    return out\n"


def rules(source: str, name: str = "run") -> set[str]:
    found = {v.rule for v in check_source(source, name).violations}
    assert found <= set(RULES), found - set(RULES)  # every reported rule is documented in policy.RULES
    return found


@pytest.mark.parametrize("kind", ["add", "softmax", "matmul"])
def test_honest_examples_are_clean(kind: str) -> None:
    for path in [solution(kind)]:
        report = check_file(path, kind)
        assert report.ok, report.violations
        assert report.unverifiable == ()
        assert report.kernels


def test_minimal_honest_launcher_is_clean() -> None:
    assert rules(entry("")) == set()


@pytest.mark.parametrize(
    ("body", "rule"),
    [
        ("    out = torch.add(x, x)\n", "torch_compute"),
        ("    out = x * 2\n", "torch_compute"),
        ("    out += 1\n", "torch_compute"),
        ("    out[0] = 1\n", "torch_compute"),
        ("    out = x.clone()\n", "torch_compute"),
        ("    out = x.to(torch.float16)\n", "torch_compute"),
        ("    s = sum(x)\n", "torch_compute"),
        ("    out = torch.nn.functional.relu(x)\n", "torch_compute"),
        ("    out = torch.ops.aten.add(x, x)\n", "runtime_internals"),
        ("    torch._C._set_grad_enabled(False)\n", "runtime_internals"),
        ("    time.perf_counter = lambda: 0.0\n", "monkeypatch"),
        ("    torch.cuda.synchronize = lambda: None\n", "monkeypatch"),
        ("    torch.allclose = lambda *a, **k: True\n", "monkeypatch"),
        ("    os.environ['TRITON_INTERPRET'] = '0'\n", "monkeypatch"),
        ("    os.system('true')\n", "process_control"),
        ("    eval('1')\n", "dynamic_code"),
        ("    exec('x = 1')\n", "dynamic_code"),
        ("    __import__('os')\n", "dynamic_code"),
        ("    open('/tmp/result.json', 'w').write('pass')\n", "file_io"),
        ("    torch.save(out, 'x.pt')\n", "file_io"),
        ("    f = getattr(torch, 'ad' + 'd')\n", "dynamic_name"),
        ("    g = run.__globals__\n", "introspection"),
        ("    exit(0)\n", "process_control"),
        ("    out = x.__add__(x)\n", "introspection"),
        ("    a = x.__array__()\n", "introspection"),
    ],
)
def test_host_rules(body: str, rule: str) -> None:
    header = HEADER.replace("import torch\n", "import os\nimport time\nimport torch\n")
    assert rule in rules(entry(body, header))


@pytest.mark.parametrize(
    ("module", "rule"),
    [
        ("threading", "threads"),
        ("subprocess", "process_control"),
        ("socket", "network"),
        ("ctypes", "ctypes"),
        ("inspect", "introspection"),
        ("gc", "introspection"),
        ("sys", "introspection"),
        ("importlib", "dynamic_code"),
        ("numpy", "host_compute"),
        ("pathlib", "file_io"),
        ("triton.testing", "runtime_internals"),
        ("torch.utils._python_dispatch", "monitor_tampering"),
        ("requests", "network"),
        ("yaml", "forbidden_import"),
    ],
)
def test_import_rules(module: str, rule: str) -> None:
    assert rule in rules(f"import {module}\n" + entry(""))


def test_violations_carry_line_numbers() -> None:
    source = entry("    out = torch.add(x, x)\n")
    (violation,) = check_source(source, "run").violations
    assert violation.rule == "torch_compute"
    assert source.splitlines()[violation.line - 1].strip() == "out = torch.add(x, x)"


def test_sys_getframe_is_introspection() -> None:
    source = "import sys\n" + entry("    f = sys._getframe(1)\n")
    assert "introspection" in rules(source)


def test_try_except_around_launch() -> None:
    source = HEADER + (
        "\n\ndef run(x):\n    out = torch.empty_like(x)\n    try:\n"
        "    " + LAUNCH + "    except Exception:\n        pass\n    return out\n"
    )
    assert "try_except_fallback" in rules(source)


def test_try_except_around_a_launching_helper() -> None:
    source = HEADER + (
        "\n\ndef _go(x, out):\n" + LAUNCH + "\n\ndef run(x):\n    out = torch.empty_like(x)\n"
        "    try:\n        _go(x, out)\n    except Exception:\n        pass\n    return out\n"
    )
    assert rules(source) == {"try_except_fallback"}


def test_launch_through_helper_counts() -> None:
    source = HEADER + "\n\ndef _go(x, out):\n" + LAUNCH + "\n\ndef run(x):\n    out = torch.empty_like(x)\n"
    source += "    _go(x, out)\n    return out\n"
    assert rules(source) == set()


def test_missing_entry_no_kernel_no_launch() -> None:
    assert "missing_entry" in rules(entry(""), name="other")
    assert "no_triton_kernel" in rules("import torch\n\ndef run(x):\n    return torch.empty_like(x)\n")
    no_launch = HEADER + "\n\ndef run(x):\n    return torch.empty_like(x)\n"
    assert rules(no_launch) == {"no_kernel_launch"}


def test_syntax_error() -> None:
    assert rules("def run(:\n") == {"syntax_error"}


def test_non_triton_code_inside_kernel() -> None:
    source = """
import math
import torch
import triton
import triton.language as tl


def helper(v):
    return v


@triton.jit
def _k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = torch.zeros(3)
    tl.store(out_ptr + offs, helper(tl.load(x_ptr + offs)))


def run(x):
    out = torch.empty_like(x)
    _k[(1,)](x, out, x.numel(), BLOCK=128)
    return out
"""
    violations = check_source(source, "run").violations
    assert {v.rule for v in violations} == {"non_triton_in_kernel"}
    assert len(violations) == 2


def test_unverifiable_features_are_not_violations() -> None:
    source = HEADER.replace(
        "import triton.language as tl\n",
        "import triton.language as tl\nfrom triton.language.extra import libdevice\n",
    ) + entry("", header="")
    report = check_source(source, "run")
    assert report.ok
    assert {v.rule for v in report.unverifiable} == {"libdevice"}
    asm = entry("").replace(
        "tl.load(x_ptr + offs, mask=offs < n)",
        "tl.inline_asm_elementwise('', '', [], dtype=tl.float32, is_pure=True, pack=1)",
    )
    assert {v.rule for v in check_source(asm, "run").unverifiable} == {"inline_asm"}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("torch_fallback.py", {"torch_compute"}),
        ("host_arith.py", {"torch_compute"}),
        ("try_fallback.py", {"try_except_fallback", "torch_compute"}),
        (
            "verdict_patch.py",
            {"monkeypatch", "file_io", "forbidden_import", "runtime_internals", "environment_probe"},
        ),
        ("crash_at_exit.py", {"process_control", "environment_probe"}),
    ],
)
def test_cheat_files_rejected(cheats: Path, name: str, expected: set[str]) -> None:
    assert {v.rule for v in check_file(cheats / name, "add").violations} == expected


@pytest.mark.parametrize(("name", "feature"), [("bf16_kernel.py", "bf16")])
def test_cheat_files_unverifiable(cheats: Path, name: str, feature: str) -> None:
    report = check_file(cheats / name, "add")
    assert report.ok
    assert {v.rule for v in report.unverifiable} == {feature}
