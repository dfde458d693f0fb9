"""What the child's runtime monitor allows, guards and treats as tampering (docs/verification.md).

Runtime-only lists, kept apart from the static gate's ``policy.py``: the child runs them against what
actually happens (aten ops, tensor methods, audit events, patched functions), attributed by frame to
the candidate's own code. Imports nothing, so the child can load it before torch.
"""

from __future__ import annotations

from types import MappingProxyType

# --- aten ops --------------------------------------------------------------------------------------
# Allocations the candidate's host code may make: replaced by a guarded, poisoned allocation.
ALLOC_OPS = frozenset(
    {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
    | {"zeros", "zeros_like", "new_zeros"}
)
ZERO_OPS = frozenset({"zeros", "zeros_like", "new_zeros"})
# A dense copy made by .contiguous()/.reshape(): also given a guarded buffer, unless it copies an
# input's data (below).
COPY_OPS = frozenset({"clone"})
# Ops that copy their source's data (and every `*_copy` op): from an input's storage they are host-side
# copies of input data, `torch_compute` unless the task sets ALLOW_INPUT_COPIES (monitor.py).
INPUT_COPY_OPS = frozenset(
    {"clone", "copy_", "copy", "_to_copy", "_copy_from", "_copy_from_and_resize", "lift_fresh_copy"}
)
# Metadata and views: harmless. Anything else issued by candidate code is "torch compute".
VIEW_OPS = frozenset(
    {
        "view",
        "_unsafe_view",
        "reshape",
        "_reshape_alias",
        "t",
        "transpose",
        "permute",
        "expand",
        "unsqueeze",
        "squeeze",
        "flatten",
        "slice",
        "select",
        "as_strided",
        "alias",
        "detach",
        "lift_fresh",  # torch.tensor(<python data>): constants in, nothing read from the inputs
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
        "is_same_size",
    }
)

# --- tensor methods that read memory without any aten op (host work invisible to a torch trace) ----
HOST_READ_METHODS = (
    "numpy",
    "__array__",
    "tolist",
    "data_ptr",
    "untyped_storage",
    "storage",
    "_typed_storage",
    "__dlpack__",
)
HOST_READ_FUNCTIONS = (
    ("torch._C", "_to_dlpack"),
    ("torch.utils.dlpack", "to_dlpack"),
    ("torch", "to_dlpack"),
)

# --- switches that turn the monitor off or peek at it: tripwires (call through, record the caller) --
TRIPWIRES = (
    ("torch._C", "_DisableTorchDispatch"),
    ("torch._C", "_EnableTorchFunction"),
    ("torch._C", "DisableTorchFunction"),
    ("torch._C", "DisableTorchFunctionSubclass"),
    ("torch._C", "_disabled_torch_dispatch_impl"),
    ("torch._C", "_disabled_torch_function_impl"),
    ("torch._C", "_pop_torch_dispatch_stack"),
    ("torch._C", "_push_on_torch_dispatch_stack"),
    ("torch._C", "_pop_torch_function_stack"),
    ("torch._C", "_push_on_torch_function_stack"),
    ("torch._C", "_set_dispatch_mode"),
    ("torch._C", "_unset_dispatch_mode"),
    ("torch._C", "_get_dispatch_mode"),
    ("torch._C", "_get_dispatch_stack_at"),
    ("torch._C", "_len_torch_dispatch_stack"),
    ("torch._C", "_len_torch_function_stack"),
    ("torch._C", "_get_function_stack_at"),
    ("torch._C", "_ExcludeDispatchKeyGuard"),
    ("torch._C", "_IncludeDispatchKeyGuard"),
    ("torch._C", "_ForceDispatchKeyGuard"),
    ("torch._C", "_PreserveDispatchKeyGuard"),
    ("torch._C", "_DisablePythonDispatcher"),
    ("torch._C", "_EnablePythonDispatcher"),
    ("torch._C", "_EnablePreDispatch"),
    ("torch._C", "_DisableFuncTorch"),
    ("torch._C", "_AutoDispatchBelowAutograd"),
    ("torch._C", "_dispatch_tls_set_dispatch_key_excluded"),
    ("torch._C", "_dispatch_tls_set_dispatch_key_included"),
    ("torch._C", "_set_meta_in_tls_dispatch_include"),
    ("torch._C", "_RestorePythonTLSSnapshot"),
    ("torch._C", "_dispatch_library"),
    ("torch.utils._python_dispatch", "_pop_mode"),
    ("torch.utils._python_dispatch", "_push_mode"),
    ("torch.utils._python_dispatch", "_pop_mode_temporarily"),
    ("torch.utils._python_dispatch", "_disable_current_modes"),
    ("torch.utils._python_dispatch", "_get_current_dispatch_mode"),
    ("torch.utils._python_dispatch", "_get_current_dispatch_mode_stack"),
    ("torch.utils._python_dispatch", "is_in_torch_dispatch_mode"),
    ("torch.utils._python_dispatch", "_is_in_torch_dispatch_mode"),
    ("torch.utils._python_dispatch", "any_torch_dispatch_mode_on_stack"),
    ("torch.overrides", "_pop_mode"),
    ("torch.overrides", "_push_mode"),
    ("torch.overrides", "_pop_mode_temporarily"),
    ("torch.overrides", "enable_reentrant_dispatch"),
    ("torch.library", "Library"),
    ("torch.library", "impl"),
    ("torch.library", "register_kernel"),
    ("torch.library", "custom_op"),
    ("torch.library", "define"),
    # The dispatch mode is thread-local: a thread's torch ops are invisible to it.
    ("_thread", "start_new_thread"),
    ("threading", "_start_new_thread"),
    # Code that runs after the calls (at exit, on a signal) runs unobserved.
    ("atexit", "register"),
    ("signal", "signal"),
    ("_signal", "signal"),
    # A forked child's CPU time and resource usage start at the fork: with torch loaded and almost no
    # CPU time spent, a process tells it was forked from a warm interpreter (the fork server). Reading
    # them is a probe of the process, like reading the environment.
    ("time", "process_time"),
    ("time", "process_time_ns"),
    ("time", "thread_time"),
    ("time", "thread_time_ns"),
    ("time", "clock_gettime"),
    ("time", "clock_gettime_ns"),
    ("os", "times"),
    ("resource", "getrusage"),
)

# --- audit events (sys.addaudithook) seen from candidate code ------------------------------------
# "direct": only when the candidate's own frame raised it (a dataclass's generated __init__ is exec'd
# by the stdlib on the candidate's behalf: not evidence); "transitive": the first non-library frame
# outward is the candidate's (a pathlib or numpy call on its behalf counts).
AUDIT_TAMPER_PREFIXES = (
    "sys.settrace",
    "sys.setprofile",
    "sys._getframe",
    "sys._current_frames",
    "sys._current_exceptions",
    "sys.addaudithook",
    "gc.",
    "object.__getattr__",
    "object.__setattr__",
    "object.__delattr__",
    "code.__new__",
    "function.__new__",
)
AUDIT_HOST_PREFIXES = ("ctypes.",)
AUDIT_FORBIDDEN_PREFIXES = (
    "open",
    "os.",
    "shutil.",
    "subprocess.",
    "socket.",
    "urllib.",
    "http.",
    "pty.",
    "mmap.",
    "marshal.",
    "pickle.",
    "exec",
    "compile",
    "import",
    "builtins.input",
    "signal.",
    "syslog.",
    "webbrowser.",
    "glob.",
)
AUDIT_TRANSITIVE_PREFIXES = ("open", "ctypes.")
# Raised by the candidate's frame for things honest launchers do (none so far).
AUDIT_IGNORE: frozenset[str] = frozenset()

# --- interpreter schedule -------------------------------------------------------------------------
ORDERS = ("natural", "reversed", "shuffled")
# A program that repeats the very same memory access (same addresses, same values) this many times in
# a row is waiting for another program: a deadlock on a GPU whenever that one is scheduled later.
SPIN_LIMIT = 2000

FLAG_FOR_FINDING = MappingProxyType(
    {
        "torch_compute": "torch_compute",
        "host_compute": "host_compute",
        "tamper": "monitor_tampered",
        "forbidden": "forbidden_runtime_call",
        "oob_read": "out_of_bounds_read",
        "oob_write": "out_of_bounds_write",
        "order": "program_order_dependent",
        # interp_semantics.py: what Triton leaves unspecified, explored.
        "input_write": "input_written",
        "false_hint": "false_hint",
        "non_associative": "non_associative_combine",
    }
)
# Notes the child sends that fail a call only together with a wrong value (judge.py): "tie" means an
# argmax/argmin with tie_break_left=False returned a later tied index than the interpreter would.
NOTE_FOR_FINDING = MappingProxyType({"tie": "tie_dependent"})
