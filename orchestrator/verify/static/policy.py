"""Allow- and deny-lists of the static gate, by *resolved* name (the object a name reaches).

Every name in a candidate is resolved to a canonical dotted path (``os.path.os.popen`` -> ``os.popen``,
``from os import path as p; p.join`` -> ``os.path.join``) before any of these lists is consulted, so
they list final targets, never textual prefixes. Shared, runtime-relevant lists stay in ``policy``.
"""

from __future__ import annotations

import builtins
import inspect
import typing
from collections.abc import Mapping
from types import MappingProxyType

import torch
import triton.language as tl

from orchestrator.verify import policy


def _names(text: str, prefix: str = "") -> frozenset[str]:
    """A set of names written as one whitespace-separated string (long lists stay readable)."""
    return frozenset(prefix + name for name in text.split())


# Canonical module names shown under the name a candidate imports them by.
MODULE_DISPLAY: Mapping[str, str] = MappingProxyType(
    {"posixpath": "os.path", "ntpath": "os.path", "genericpath": "os.path", "posix": "os", "nt": "os"}
)

# --- torch -----------------------------------------------------------------------------------------
TORCH_DTYPE_NAMES = frozenset(
    f"torch.{n}"
    for n, v in vars(torch).items()
    if isinstance(v, torch.dtype | torch.layout | torch.memory_format)
)
# Names a launcher may mention without calling them (annotations, isinstance, dtype arguments).
TORCH_REFERENCE_ALLOW = (
    policy.TORCH_CALL_ALLOW
    | TORCH_DTYPE_NAMES
    | _names("Tensor dtype device Size no_grad inference_mode", "torch.")
)
TORCH_HOST_CALL_ALLOW = policy.TORCH_CALL_ALLOW | _names("no_grad inference_mode", "torch.")
TORCH_ALLOCATORS = _names("empty empty_like empty_strided zeros zeros_like", "torch.")
# torch entry points that move data between the host and tensors outside a torch op trace.
TORCH_HOST_ESCAPES = _names(
    "from_numpy frombuffer as_tensor asarray tensor utils.dlpack from_dlpack to_dlpack Tensor.numpy"
    " Tensor.tolist"
    " Tensor.item Tensor.cpu Tensor.untyped_storage Tensor.storage UntypedStorage TypedStorage storage",
    "torch.",
)
TORCH_FILE_IO = _names("save load hub serialization", "torch.")

# Switching off, or stepping around, the child's monitor (dispatch mode, launch hooks, allocations,
# the RNG and numerics the reference relies on): matched as dotted prefixes of the resolved target.
MONITOR_TAMPERING_PREFIXES: tuple[str, ...] = tuple(
    sorted(
        _names(
            "overrides utils._python_dispatch _dynamo _inductor compile compiler jit fx library _library"
            " _custom_op _custom_ops _higher_order_ops _subclasses _functorch func vmap autograd enable_grad"
            " set_grad_enabled set_default_device set_default_dtype set_default_tensor_type"
            " set_float32_matmul_precision set_flush_denormal use_deterministic_algorithms"
            " set_deterministic_debug_mode set_num_threads set_num_interop_threads set_warn_always"
            " manual_seed"
            " seed initial_seed get_rng_state set_rng_state Generator default_generator random backends"
            " cuda.manual_seed cuda.manual_seed_all cuda.seed cuda.seed_all cuda.initial_seed"
            " cuda.get_rng_state"
            " cuda.get_rng_state_all cuda.set_rng_state cuda.set_rng_state_all cuda.set_sync_debug_mode"
            " Tensor.__torch_function__ Tensor.__torch_dispatch__ Tensor.__class__",
            "torch.",
        )
        | _names(
            "setprofile settrace addaudithook audit modules meta_path path_hooks path_importer_cache"
            " excepthook"
            " unraisablehook displayhook breakpointhook monitoring setrecursionlimit setswitchinterval",
            "sys.",
        )
        | _names("setprofile settrace setprofile_all_threads settrace_all_threads excepthook", "threading.")
    )
)
# Inside torch._C: the dispatch / torch-function machinery (mode stacks, key guards, disable guards).
TORCH_C_TAMPERING_MARKERS = (
    "Dispatch",
    "dispatch",
    "TorchFunction",
    "torch_function",
    "FuncTorch",
    "functorch",
)

# --- os ----------------------------------------------------------------------------------------------
OS_PATH_PURE = _names(
    "join basename dirname split splitext splitdrive normpath normcase isabs commonprefix commonpath sep"
    " extsep"
    " altsep pathsep curdir pardir",
    "os.path.",
) | _names("sep extsep altsep pathsep linesep curdir pardir name", "os.")
# What differs between a test run and production: environment, identity, cwd, file-system state.
OS_ENVIRONMENT_PROBES = _names(
    "environ environb getenv getenvb getpid getppid getuid geteuid getgid getegid getlogin getpgrp getpgid"
    " getsid cpu_count process_cpu_count sched_getaffinity getcwd getcwdb uname times getloadavg urandom"
    " getrandom get_terminal_size ctermid ttyname",
    "os.",
) | _names(
    "exists lexists isfile isdir islink ismount isjunction getsize getmtime getatime getctime samefile"
    " sameopenfile samestat realpath abspath relpath expanduser expandvars",
    "os.path.",
)
OS_MONKEYPATCH = _names("putenv unsetenv chdir fchdir umask nice", "os.")

# --- triton ----------------------------------------------------------------------------------------
TRITON_DTYPE_NAMES = frozenset(f"triton.language.{n}" for n, v in vars(tl).items() if isinstance(v, tl.dtype))
TRITON_HOST_ALLOW = (
    _names("jit autotune heuristics Config cdiv next_power_of_2", "triton.")
    | _names("constexpr tensor dtype cdiv", "triton.language.")
    | TRITON_DTYPE_NAMES
)
TRITON_KERNEL_DECORATORS = _names("jit autotune heuristics", "triton.")
TRITON_DOT = "triton.language.dot"

# Attributes of Triton values (tensors, pointers, dtypes, constexprs) a kernel body may use. Anything
# else (`.handle`, the interpreter's numpy array) only exists in the interpreter: a cpu-pool pass
# through it says nothing about the device.
KERNEL_VALUE_ATTRS = (
    frozenset(
        n for cls in (tl.tensor, tl.dtype, tl.pointer_type, tl.block_type, tl.constexpr) for n in dir(cls)
    )
    - frozenset(dir(object))
    | _names(
        "dtype shape type numel element_ty value name primitive_bitwidth address_space int_bitwidth"
        " int_signedness fp_mantissa_width exponent_bias T"
    )
) - {"handle"}
# The Python builtins Triton's compiler accepts in a kernel (code_generator.builtin_namespace).
KERNEL_BUILTINS = _names("len list range float int isinstance getattr hasattr print min max")

# --- builtins and the allowed standard library ------------------------------------------------------
BUILTINS_ALLOW = _names(
    "abs all any ascii bin bool callable chr classmethod complex dict divmod enumerate filter float format"
    " frozenset hex int isinstance issubclass iter len list map max min next object oct ord pow print"
    " property"
    " range repr reversed round set slice sorted staticmethod str sum tuple zip Ellipsis NotImplemented"
) | {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}
# Members of these builtin classes are ordinary value methods (str.join, dict.fromkeys, ...).
BUILTIN_CLASSES_WITH_MEMBERS = _names("str int float complex dict list tuple set frozenset bool range slice")
BUILTIN_DENIED_MEMBERS = _names("str.format str.format_map str.maketrans")
# Calls whose format string may read attributes or items of their arguments ({0.x}, {0[k]}).
FORMAT_METHODS = _names("format format_map")

# typing is for annotations: what evaluates or inspects them at runtime is a dynamic lookup.
_TYPING_DENY = _names(
    "get_type_hints ForwardRef get_overloads clear_overloads no_type_check no_type_check_decorator get_args"
    " get_origin reveal_type"
)
STDLIB_ALLOWED_MEMBERS: Mapping[str, frozenset[str] | None] = MappingProxyType(
    {  # None: every public member
        "math": None,
        "itertools": None,
        "numbers": None,
        "__future__": None,
        "collections.abc": None,
        "functools": _names("partial reduce cache lru_cache"),
        "collections": _names("namedtuple deque defaultdict OrderedDict Counter ChainMap"),
        "dataclasses": _names(
            "dataclass field fields replace is_dataclass InitVar KW_ONLY MISSING FrozenInstanceError"
        ),
        "enum": _names("Enum IntEnum Flag IntFlag StrEnum auto unique"),
        "abc": _names("ABC abstractmethod"),
        "typing": frozenset(n for n in typing.__all__ if n not in _TYPING_DENY),
    }
)
STDLIB_DYNAMIC_NAME = frozenset(f"typing.{n}" for n in _TYPING_DENY)

# Decorators an honest module uses; any other could bind the name to something other than the def
# the gate checked. cache/lru_cache only on functions that neither are the entry nor launch a kernel.
HOST_DECORATORS = _names("torch.no_grad torch.inference_mode functools.cache functools.lru_cache")
CACHE_DECORATORS = _names("functools.cache functools.lru_cache")
METHOD_DECORATORS = _names("staticmethod classmethod property", "builtins.")
CLASS_DECORATORS = _names("dataclasses.dataclass enum.unique")
CLASS_BASES = (
    _names("builtins.object abc.ABC typing.NamedTuple typing.Protocol typing.Generic")
    | _names("Enum IntEnum Flag IntFlag StrEnum", "enum.")
    | {f"builtins.{n}" for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, Exception)}
)
# Methods a class may define under a dunder name: any other runs implicitly (operators, attribute
# lookup, hashing, __torch_function__, __index__, __del__, ...), out of the gate's sight.
CLASS_DUNDER_METHODS = _names("__init__ __post_init__")
# Dunder names a module may bind (any other, e.g. a module-level __getattr__, changes lookup itself).
BINDABLE_DUNDERS = _names("__all__ __slots__ __doc__")
# Implicit module globals a candidate may read.
READABLE_DUNDER_NAMES = _names("__name__ __doc__ __qualname__ __module__ __debug__")
DUNDER_NAME_RULES: Mapping[str, str] = MappingProxyType(
    dict.fromkeys(("__file__", "__cached__", "__path__"), "environment_probe")
)

# Frame, code and traceback attributes (whatever object they are read from).
FRAME_ATTRS = _names(
    "f_back f_locals f_globals f_builtins f_code f_trace f_lasti f_lineno gi_frame gi_code gi_yieldfrom"
    " gi_running gi_suspended cr_frame cr_code cr_await cr_origin ag_frame ag_code ag_await tb_frame tb_next"
    " tb_lasti tb_lineno co_code co_consts co_names co_varnames co_filename"
)
# Tensor methods that move values to the host where a torch op trace cannot follow them.
TENSOR_HOST_ESCAPE_METHODS = _names(
    "numpy tolist item cpu untyped_storage storage _typed_storage __array__ __array_interface__"
    " __array_priority__ __cuda_array_interface__ __dlpack__ __dlpack_device__ share_memory_ pin_memory set_"
    " as_strided as_strided_"
)
# Tensor methods that expose where the harness placed a buffer (guard bands, offsets): fingerprints.
TENSOR_FINGERPRINT_METHODS = _names("data_ptr storage_offset is_pinned is_shared _cdata")
# Tensor attributes that are data, not methods (reading `.shape` or `.dtype` computes nothing).
TENSOR_PROPERTIES = frozenset(
    n for n in dir(torch.Tensor) if not callable(inspect.getattr_static(torch.Tensor, n, None))
)
# Calls that are fine with a tensor argument (metadata only).
TENSOR_SAFE_CALLS = _names("builtins.len builtins.isinstance builtins.callable")
# Attributes no launcher needs whatever the object: `.handle` is the interpreter's raw numpy array.
ALWAYS_DENIED_ATTRS = _names("handle")

# --- devices ----------------------------------------------------------------
# Attributes that say which device a tensor is on, whatever object they are read from (`x.is_cuda`,
# `getattr(x, "is_npu")`): a branch on them runs a path the cpu pool never sees.
DEVICE_PREDICATES = _names(
    "is_cuda is_cpu is_npu is_xpu is_mps is_meta is_ipu is_xla is_hpu is_mtia is_maia is_vulkan is_mkldnn"
    " get_device"
)
# Attributes of a device (`dev.type`, `dev.index`). `.type` is rejected on any plain object of host
# code (a tensor's `.type()` names its device too); `.index` only on a device (lists have one).
DEVICE_ATTRS = _names("type index")
# Calls a device may be passed to: they build tensors on it (or a device from it) and return nothing
# that depends on which device it is.
DEVICE_SINKS = TORCH_ALLOCATORS | _names("torch.device builtins.isinstance")
DEVICE_SINK_METHODS = _names("new_empty new_zeros new_empty_strided")
