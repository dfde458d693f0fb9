"""What a candidate may use: the allow- and deny-lists shared by the static gate and the child monitor.

Kept in one place so the static rules (docs/verification.md) and the runtime recording agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import torch

# Rule names reported by the static gate (each violation carries one, plus a line number).
RULES: Mapping[str, str] = MappingProxyType(
    {
        "syntax_error": "the candidate does not parse",
        "missing_entry": "the task's entry function is not defined at module level",
        "no_triton_kernel": "no @triton.jit kernel is defined",
        "no_kernel_launch": "the entry never launches a kernel (kernel[grid](...))",
        "torch_compute": "torch computation outside the allocation/view allow-list",
        "runtime_internals": "torch.ops/aten, torch._C, dispatch hooks or triton runtime/testing internals",
        "host_compute": "a host-side numeric library (numpy, scipy, ...) that could compute a fallback",
        "threads": "threads or async tasks",
        "process_control": "subprocesses, os.system/fork/exec/kill, exiting the process",
        "network": "sockets or network clients",
        "ctypes": "ctypes/cffi/mmap raw memory access",
        "introspection": "frame, heap or module introspection (sys, inspect, gc, getattr, __dict__, ...)",
        "monkeypatch": "assigning to attributes of imported modules or objects (timers, verdict functions)",
        "dynamic_code": "eval/exec/compile/__import__/importlib/pickle",
        "file_io": "opening, writing or deleting files",
        "try_except_fallback": "try/except (or suppress) around a kernel launch",
        "forbidden_import": "an import outside the allow-list",
        "non_triton_in_kernel": "a @triton.jit body uses a non-Triton module or a plain Python helper",
        "dynamic_name": (
            "a name the gate cannot resolve statically: computed getattr, vars()/globals()/__dict__, a module"
            " used as a value, format-string attribute access, star imports, a checked function rebound"
        ),
        "monitor_tampering": (
            "switches off or side-steps the harness' monitor: dispatch/function modes, tracing and profiling"
            " hooks, sys.modules, torch.compile/jit/fx/library, autograd functions, default device/dtype, RNG"
            " state, backend flags, __class__ swaps, __torch_function__/__torch_dispatch__ classes"
        ),
        "environment_probe": (
            "reads what differs between a test and production: environment variables, clocks, process ids,"
            " file-system state, the module's own path, buffer addresses (data_ptr, storage_offset), the"
            " stack's depth (recursive functions, RecursionError)"
        ),
        "device_conditioned": (
            "reads or branches on which device the code runs on (torch.cuda/npu queries, is_cuda,"
            " device.type, comparing or formatting a device): the cpu pool never runs the other path"
        ),
        "forbidden_name": "a name outside the allow-list, reached through an allowed module",
        "decorator": "a decorator outside the allow-list (it could replace the function the gate checked)",
        "tf32_dot": (
            'float32 task: tl.dot without input_precision="ieee" (TF32 on a GPU, full fp32 in the'
            " interpreter)"
        ),
    }
)

# Features the CPU interpreter cannot run faithfully: they make a cpu-pool verdict "unverifiable".
UNVERIFIABLE_ON_CPU: Mapping[str, str] = MappingProxyType(
    {
        "bf16": "bf16 arithmetic is wrong in the Triton interpreter (raw bit patterns)",
        "libdevice": "libdevice calls need a real device",
        "inline_asm": "inline asm (tl.inline_asm_elementwise) needs a real device",
    }
)

ALLOWED_IMPORT_ROOTS = frozenset(
    {
        "__future__",
        "torch",
        "triton",
        "math",
        "typing",
        "functools",
        "dataclasses",
        "itertools",
        "collections",
        "enum",
        "numbers",
        "abc",
        "os",  # only the pure os.path string functions are allowed, see OS_ALLOWED
    }
)

# Imports outside the allow-list that map to a more precise rule.
MODULE_RULES: Mapping[str, str] = MappingProxyType(
    {
        **dict.fromkeys(
            ("sys", "inspect", "gc", "traceback", "tracemalloc", "faulthandler"), "introspection"
        ),
        **dict.fromkeys(("subprocess", "multiprocessing", "pty", "signal", "atexit"), "process_control"),
        **dict.fromkeys(("threading", "_thread", "concurrent", "asyncio", "sched"), "threads"),
        **dict.fromkeys(("socket", "ssl", "http", "urllib", "requests", "httpx", "ftplib"), "network"),
        **dict.fromkeys(("ctypes", "cffi", "mmap", "_ctypes"), "ctypes"),
        **dict.fromkeys(
            (
                "importlib",
                "runpy",
                "pickle",
                "marshal",
                "shelve",
                "builtins",
                "code",
                "codeop",
                "types",
                "dill",
            ),
            "dynamic_code",
        ),
        **dict.fromkeys(
            ("numpy", "scipy", "jax", "jaxlib", "cupy", "numba", "tensorflow", "pandas", "mlx"),
            "host_compute",
        ),
        **dict.fromkeys(
            (
                "shutil",
                "tempfile",
                "pathlib",
                "io",
                "_io",
                "glob",
                "fileinput",
                "zipfile",
                "tarfile",
                "linecache",
            ),
            "file_io",
        ),
        **dict.fromkeys(("array", "struct", "_struct", "pickletools"), "host_compute"),
        **dict.fromkeys(("operator", "_operator", "string", "keyword"), "dynamic_name"),
        **dict.fromkeys(("weakref", "_weakref", "copyreg", "dis", "symtable", "ast"), "introspection"),
        **dict.fromkeys(("pkgutil", "zipimport", "site", "imp", "_imp", "_frozen_importlib"), "dynamic_code"),
        **dict.fromkeys(
            ("time", "platform", "sysconfig", "getpass", "pwd", "grp", "locale", "uuid"), "environment_probe"
        ),
        **dict.fromkeys(("_signal", "resource", "_posixsubprocess", "pdb", "bdb"), "process_control"),
        **dict.fromkeys(("select", "selectors", "_socket"), "network"),
    }
)

# Dotted prefixes that are internals, whether imported or reached by attribute.
INTERNAL_PREFIXES: tuple[str, ...] = (
    "torch.ops",
    "torch._",
    "torch.library",
    "torch.overrides",
    "torch.utils",
    "torch.testing",
    "torch.fx",
    "torch.compiler",
    "torch.cuda._",
    "triton.runtime",
    "triton.testing",
    "triton.knobs",
    "triton.compiler",
    "triton.backends",
    "triton._",
    "triton.tools",
    "triton.profiler",
    "triton.language.extra.cuda.utils",
)

# torch functions a launcher may call: allocation, metadata and device queries only.
_TORCH_PLAIN_CALLS = frozenset(
    {
        "torch.empty",
        "torch.empty_like",
        "torch.empty_strided",
        "torch.zeros",
        "torch.zeros_like",
        "torch.device",
        "torch.Size",
        "torch.finfo",
        "torch.iinfo",
        "torch.is_tensor",
        "torch.is_floating_point",
        "torch.get_default_dtype",
    }
)

# Device queries on TORCH_CALL_ALLOW: not torch compute, but each tells the device the code runs on,
# so the gate rejects them (`device_conditioned`) unless a task permits them by name (DEVICE_QUERIES
# in task.py). synchronize is one too: it raises where the device is absent, so a try around it is a
# probe, and the harness synchronizes after every call anyway.
PERMITTABLE_DEVICE_QUERIES = frozenset(
    {
        "torch.cuda.is_available",
        "torch.cuda.current_device",
        "torch.cuda.device_count",
        "torch.cuda.get_device_capability",
        "torch.cuda.get_device_properties",
        "torch.cuda.synchronize",
        "torch.npu.current_device",
        "torch.npu.synchronize",
    }
)
# Torch calls that are not compute: the plain ones and the device queries (judged by the gate's
# device rule, not as compute).
TORCH_CALL_ALLOW = _TORCH_PLAIN_CALLS | PERMITTABLE_DEVICE_QUERIES
# Where device queries live: every member of these (by resolved object) is `device_conditioned`.
DEVICE_NAMESPACES: tuple[str, ...] = (
    "torch.cuda",
    "torch.npu",
    "torch.xpu",
    "torch.mps",
    "torch.mtia",
    "torch.hpu",
    "torch.cpu",
    "torch.accelerator",
    "torch.backends",
    "torch.version",
    "torch.get_device",
    "torch.get_device_module",
    "torch.get_default_device",
    "torch.is_vulkan_available",
    "triton.language.target_info",
)

# Tensor methods a launcher may call (metadata, views, layout).
TENSOR_METHOD_ALLOW = frozenset(
    {
        "view",
        "view_as",
        "reshape",
        "reshape_as",
        "contiguous",
        "stride",
        "numel",
        "size",
        "dim",
        "ndimension",
        "is_contiguous",
        "element_size",
        "unsqueeze",
        "squeeze",
        "flatten",
        "t",
        "transpose",
        "permute",
        "expand",
        "new_empty",
        "new_zeros",
        "get_device",
        "is_floating_point",
    }
)

# Method names shared with builtin containers/str: a call like d.values() is not evidence of torch use.
_AMBIGUOUS_METHODS = frozenset({"index", "values", "split", "real", "imag"})

TENSOR_COMPUTE_METHODS = (
    frozenset(n for n in dir(torch.Tensor) if not n.startswith("_") and n not in TENSOR_METHOD_ALLOW)
    - _AMBIGUOUS_METHODS
)

# os functions a launcher may call: pure path-string functions only (reading the environment, the
# process identity or the file system lets a candidate tell a test from production). Final targets:
# the static gate resolves `os.path.os.popen` to `os.popen` before it looks here.
OS_ALLOWED = frozenset(
    f"os.path.{n}"
    for n in (
        "join",
        "basename",
        "dirname",
        "split",
        "splitext",
        "splitdrive",
        "normpath",
        "normcase",
        "isabs",
    )
)
OS_ALLOWED_PREFIXES: tuple[str, ...] = ()  # kept for importers; the gate never allows by prefix
OS_PROCESS = frozenset(
    {"system", "popen", "fork", "forkpty", "kill", "killpg", "_exit", "abort", "setsid", "wait", "waitpid"}
)
OS_PROCESS_PREFIXES = ("exec", "spawn", "posix_spawn")

# Builtins a candidate may not use (getattr/hasattr only with a constant attribute name).
BUILTIN_RULES: Mapping[str, str] = MappingProxyType(
    {
        "eval": "dynamic_code",
        "exec": "dynamic_code",
        "compile": "dynamic_code",
        "__import__": "dynamic_code",
        "__build_class__": "dynamic_code",
        "open": "file_io",
        "input": "file_io",
        "getattr": "dynamic_name",
        "hasattr": "dynamic_name",
        "setattr": "introspection",
        "delattr": "introspection",
        "globals": "dynamic_name",
        "locals": "dynamic_name",
        "vars": "dynamic_name",
        "dir": "dynamic_name",
        "super": "introspection",
        "type": "introspection",
        "id": "introspection",
        "hash": "introspection",
        "help": "introspection",
        "breakpoint": "introspection",
        "memoryview": "host_compute",
        "bytearray": "host_compute",
        "bytes": "host_compute",
        "aiter": "threads",
        "anext": "threads",
        "exit": "process_control",
        "quit": "process_control",
        "SystemExit": "process_control",
        "KeyboardInterrupt": "process_control",
    }
)

# Dunder attributes a launcher may touch; any other (x.__add__, x.__array__, ...) is introspection.
DUNDER_ALLOW = frozenset({"__name__", "__doc__", "__qualname__", "__module__", "__init__"})

DUNDER_INTROSPECTION = frozenset(
    {
        "__dict__",
        "__globals__",
        "__code__",
        "__closure__",
        "__builtins__",
        "__subclasses__",
        "__bases__",
        "__mro__",
        "__getattribute__",
        "__setattr__",
        "__torch_function__",
        "__torch_dispatch__",
        "__class__",
        "__self__",
        "__func__",
        "__wrapped__",
        "__defaults__",
        "__kwdefaults__",
        "__loader__",
        "__spec__",
        "__reduce__",
        "__reduce_ex__",
        "__getstate__",
        "__array__",
        "__dlpack__",
        "f_back",
        "f_locals",
        "f_globals",
        "gi_frame",
        "tb_frame",
        "cr_frame",
    }
)
