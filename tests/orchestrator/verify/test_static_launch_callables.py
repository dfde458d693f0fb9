"""Code that runs inside a launch (decorator arguments, heuristics, autotune hooks, grid callables) is
host code; a kernel body may only be Triton; a float32 task's tl.dot must be IEEE fp32."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.verify.policy import RULES
from orchestrator.verify.static.gate import check_file, check_source

HERE = Path(__file__).resolve().parent
STATIC_CHEATS = HERE / "cheats" / "static"
MATMUL = HERE.parents[2] / "gateway" / "tasks" / "catalogue" / "solutions" / "matmul.py"


def rules(source: str, entry: str = "add", dtypes: tuple[str, ...] = ()) -> set[str]:
    found = {v.rule for v in check_source(source, entry, dtypes=dtypes).violations}
    assert found <= set(RULES), found - set(RULES)
    return found


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("heuristics_host_compute.py", "torch_compute"),
        ("heuristics_named_hook.py", "torch_compute"),
        ("autotune_hooks.py", "torch_compute"),
        ("jit_launch_metadata.py", "torch_compute"),
        ("grid_function_compute.py", "torch_compute"),
        ("interpreter_only_kernel.py", "non_triton_in_kernel"),
    ],
)
def test_launch_callable_cheats_rejected(name: str, expected: str) -> None:
    assert expected in {v.rule for v in check_file(STATIC_CHEATS / name, "add").violations}


def test_every_hook_of_the_autotune_cheat_is_reported() -> None:
    source = (STATIC_CHEATS / "autotune_hooks.py").read_text()
    lines = {source.splitlines()[v.line - 1].strip() for v in check_source(source, "add").violations}
    assert 'named_args["out_ptr"][:] = named_args["x_ptr"] + named_args["y_ptr"]' in lines  # prune
    assert 'nargs["out_ptr"][:] = nargs["x_ptr"] + nargs["y_ptr"]' in lines  # Config pre_hook
    assert any("post_hook" in line for line in lines)  # the post_hook lambda


HEADER = """
import torch
import triton
import triton.language as tl
"""

KERNEL = """
@triton.jit
def _k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    {body}
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def add(x, y):
    out = torch.empty_like(x)
    _k[{grid}](x, out, x.numel(), BLOCK=256)
    return out
"""


def kernel_source(body: str = "pass", grid: str = "(triton.cdiv(x.numel(), 256),)", module: str = "") -> str:
    return HEADER + module + KERNEL.format(body=body, grid=grid)


def test_kernel_template_is_clean() -> None:
    assert rules(kernel_source()) == set()


@pytest.mark.parametrize(
    ("grid", "module", "rule"),
    [
        ('lambda meta: (meta["out_ptr"].copy_(meta["x_ptr"]).numel(),)', "", "torch_compute"),
        ('lambda meta: (int(meta["x_ptr"].sum()),)', "", "torch_compute"),
        ('lambda meta: (triton.cdiv(torch.numel(x), meta["BLOCK"]),)', "", "torch_compute"),
        (
            "_grid",
            "def _grid(meta):\n    meta['out_ptr'][:] = meta['x_ptr'] * 2\n    return (1,)\n",
            "torch_compute",
        ),
        ("_grid", "_grid = lambda meta: (len(meta['x_ptr'].tolist()),)\n", "host_compute"),
        (
            "_grid",
            "def _grid(meta):\n    return _inner(meta)\n\n\ndef _inner(m):\n    m['out_ptr'][0] = 1\n"
            "    return (1,)\n",
            "torch_compute",
        ),
    ],
)
def test_grid_callables_are_host_code(grid: str, module: str, rule: str) -> None:
    assert rule in rules(kernel_source(grid=grid, module=module))


@pytest.mark.parametrize(
    ("decorator", "rule"),
    [
        ('@triton.heuristics({"B": lambda a: a["x_ptr"].sum().item()})', "torch_compute"),
        ('@triton.heuristics(values={"B": lambda a: float(a["x_ptr"][0])})', "torch_compute"),
        ('@triton.heuristics({"B": lambda a: a["out_ptr"].fill_(0) is None})', "torch_compute"),
        ('@triton.heuristics({"B": lambda a: __import__("os").system("true")})', "dynamic_code"),
        (
            "@triton.autotune(configs=[triton.Config({}, pre_hook=lambda nargs: nargs['out_ptr'].zero_())], "
            "key=['n'])",
            "torch_compute",
        ),
        (
            "@triton.autotune(configs=[], key=['n'], prune_configs_by={'perf_model': lambda **kw: "
            "kw['x_ptr'].mean()})",
            "torch_compute",
        ),
        (
            "@triton.autotune(configs=[], key=['n'], pre_hook=lambda a: torch.add(a['x_ptr'], 1))",
            "torch_compute",
        ),
        ("@triton.heuristics({'B': lambda a: os.getpid()})", "environment_probe"),
    ],
)
def test_decorator_arguments_are_host_code(decorator: str, rule: str) -> None:
    source = (
        HEADER
        + "import os\n"
        + KERNEL.format(body="pass", grid="(1,)").replace("@triton.jit", decorator + "\n@triton.jit", 1)
    )
    assert rule in rules(source)


@pytest.mark.parametrize(
    ("body", "module", "rule"),
    [
        ('tl.core.builtins.exec("1")', "", "dynamic_code"),
        ("f = tl.core.inspect.currentframe()", "", "introspection"),
        ("v = tl.load(x_ptr + offs).handle.data", "", "non_triton_in_kernel"),
        ("_STATE[0] = 1", "_STATE = {}\n", "non_triton_in_kernel"),
        ("v = _TABLE", "_TABLE = [1, 2]\n", "non_triton_in_kernel"),
        ("v = abs(offs)", "", "non_triton_in_kernel"),
        ("f = lambda a: a", "", "non_triton_in_kernel"),
        ("v = math.sqrt(2.0)", "import math\n", "non_triton_in_kernel"),
        ("v = getattr(tl, 'lo' + 'ad')", "", "dynamic_name"),
        ("m = tl.core.typing.sys.modules", "", "monitor_tampering"),
    ],
)
def test_kernel_body_rules(body: str, module: str, rule: str) -> None:
    assert rule in rules(kernel_source(body=body, module=module))


def test_constexpr_globals_and_jit_helpers_are_fine_in_kernels() -> None:
    module = "_SCALE = tl.constexpr(2)\n_N = 4\n\n\n@triton.jit\ndef _twice(v):\n    return v * _SCALE\n"
    assert rules(kernel_source(body="v = _twice(offs) + _N", module=module)) == set()


def test_kernel_signature_defaults_are_host_code() -> None:
    source = kernel_source().replace("BLOCK: tl.constexpr)", "BLOCK: tl.constexpr = torch.add(1, 2))")
    assert "torch_compute" in rules(source)


# --- TF32 ------------------------------------------------------------------------------------------
def matmul_with(dot: str, imports: str = "") -> str:
    source = MATMUL.read_text()
    assert 'tl.dot(a, b, input_precision="ieee")' in source
    source = source.replace('tl.dot(a, b, input_precision="ieee")', dot)
    return source.replace("import triton.language as tl\n", "import triton.language as tl\n" + imports, 1)


def test_honest_matmul_is_ieee() -> None:
    assert rules(MATMUL.read_text(), "matmul", ("float32", "float16")) == set()


@pytest.mark.parametrize(
    ("dot", "imports"),
    [
        ("tl.dot(a, b)", ""),
        ('tl.dot(a, b, input_precision="tf32")', ""),
        ('tl.dot(a, b, input_precision="tf32x3")', ""),
        ('tl.dot(a, b, input_precision="bf16x3")', ""),
        ("tl.dot(a, b, allow_tf32=True)", ""),
        ("tl.dot(a, b, allow_tf32=False)", ""),
        ('tl.dot(a, b, None, "tf32")', ""),
        ("tl.dot(a, b, input_precision=PREC)", ""),
        ('tl.dot(a, b, **{"input_precision": "tf32"})', ""),
        ("_mm(a, b)", "from triton.language import dot as _mm\n"),
        ("tl.core.dot(a, b)", ""),
        ("triton.language.dot(a, b)", ""),
        ("lang.dot(a, b)", "from triton import language as lang\n"),
    ],
)
def test_tf32_dot_rejected_for_float32_tasks(dot: str, imports: str) -> None:
    source = matmul_with(dot, imports).replace(
        "BLOCK_K: tl.constexpr,", "BLOCK_K: tl.constexpr, PREC: tl.constexpr = 'ieee',"
    )
    found = check_source(source, "matmul", dtypes=("float32",)).violations
    tf32 = [v for v in found if v.rule == "tf32_dot"]
    assert tf32, found
    assert "ieee" in tf32[0].message and "interpreter" in tf32[0].message and "1e-3" in tf32[0].message


def test_tf32_rule_only_for_float32_tasks() -> None:
    source = matmul_with("tl.dot(a, b)")
    assert "tf32_dot" not in rules(source, "matmul", ("float16", "bfloat16"))
    assert "tf32_dot" not in rules(source, "matmul")
    assert "tf32_dot" in rules(source, "matmul", ("float16", "float32"))
    assert "tf32_dot" in {
        v.rule
        for v in check_file(STATIC_CHEATS / "matmul_tf32_default.py", "matmul", dtypes=["float32"]).violations
    }


def test_autotune_through_an_alias_is_checked_and_verifiable_on_cpu() -> None:
    """@triton.autotune runs on the cpu pool (every config, interp_autotune.py): not unverifiable."""
    autotune = (
        HEADER
        + "_at = triton.autotune\n"
        + KERNEL.format(body="pass", grid="(1,)").replace(
            "@triton.jit", "@_at(configs=[triton.Config({})], key=['n'])\n@triton.jit", 1
        )
    )
    report = check_source(autotune, "add")
    assert report.ok, report.violations
    assert report.unverifiable == ()
    assert report.kernels


def test_lazily_loaded_triton_modules_are_resolved_and_unknown_triton_names_rejected() -> None:
    source = (
        HEADER
        + "from triton.language.extra import libdevice\n"
        + kernel_source(
            body="v = libdevice.exp(offs.to(tl.float32))\n    w = tl.not_a_triton_function(v)"
        ).replace(HEADER, "")
    )
    report = check_source(source, "add")
    assert [(v.rule, "not_a_triton_function" in v.message) for v in report.violations] == [
        ("non_triton_in_kernel", True)
    ]
    assert {v.rule for v in report.unverifiable} == {"libdevice"}
