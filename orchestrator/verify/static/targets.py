"""What the static gate decides about a resolved target (a module or a member reached from one).

The decision is by final target: `os.path.join` is fine, `os.path.os.popen` is `os.popen` and is
process control, `torch.functional.torch._C._DisableTorchDispatch` is monitor tampering. An object
identical to an allow-listed one is allowed however it was reached; everything else is matched by
its canonical dotted path.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from orchestrator.verify import policy
from orchestrator.verify.static import policy as sp
from orchestrator.verify.static.values import MemberValue, ModuleValue, missing, real_member


@dataclass(frozen=True)
class Finding:
    rule: str
    message: str


def _under(path: str, prefixes: tuple[str, ...] | frozenset[str]) -> bool:
    return any(path == p or path.startswith(p + ".") for p in prefixes)


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and len(name) > 4


def _private(parts: list[str]) -> bool:
    return any(p.startswith("_") and not _is_dunder(p) for p in parts)


def _internal(path: str) -> bool:
    for prefix in policy.INTERNAL_PREFIXES:
        if prefix.endswith("_") and path.startswith(prefix):
            return True
        if path == prefix or path.startswith(prefix + "."):
            return True
    return False


def _monitor(path: str) -> bool:
    if _under(path, sp.MONITOR_TAMPERING_PREFIXES):
        return True
    rest = path.removeprefix("torch._C.")
    return rest != path and any(marker in rest for marker in sp.TORCH_C_TAMPERING_MARKERS)


@functools.cache
def _allowed_objects(call: bool) -> dict[int, str]:
    """id() of every allow-listed object (so that an alias of one is allowed as that object)."""
    paths = (
        (sp.TORCH_HOST_CALL_ALLOW if call else sp.TORCH_REFERENCE_ALLOW)
        | sp.TRITON_HOST_ALLOW
        | sp.OS_PATH_PURE
    )
    out: dict[int, str] = {}
    for path in paths:
        module, _, attr = path.rpartition(".")
        canonical = {"os.path": "posixpath"}.get(module, module)
        obj = real_member(canonical, (attr,))
        if not missing(obj) and not isinstance(obj, int | float | str | bool | type(None)):
            out[id(obj)] = path
    return out


def _allowed_identity(value: MemberValue, call: bool) -> bool:
    obj = real_member(value.module, value.attrs)
    return not missing(obj) and id(obj) in _allowed_objects(call)


def is_object(value: MemberValue, path: str) -> bool:
    """Whether `value` is the same object as the one `path` names (e.g. triton.language.dot)."""
    module, _, attr = path.rpartition(".")
    target = real_member(module, (attr,))
    obj = real_member(value.module, value.attrs)
    if missing(target) or missing(obj):
        return value.display == path
    return obj is target


def module_rule(value: ModuleValue) -> Finding | None:
    """The rule a reference to a whole module breaks, if any (members are judged on their own)."""
    name = value.display
    root = name.split(".")[0]
    if _monitor(name):
        return Finding("monitor_tampering", f"use of {name}")
    if _internal(name) or _private(name.split(".")):
        return Finding("runtime_internals", f"use of {name}")
    rule = (
        policy.MODULE_RULES.get(name) or policy.MODULE_RULES.get(value.name) or policy.MODULE_RULES.get(root)
    )
    if rule:
        return Finding(rule, f"use of module {name}")
    if root not in policy.ALLOWED_IMPORT_ROOTS:
        return Finding("forbidden_import", f"use of module {name} (not on the import allow-list)")
    return None


def member_rule(value: MemberValue, *, call: bool) -> Finding | None:
    """The rule a host-side use of `value` breaks, or None when it is allowed."""
    path = value.display
    parts = path.split(".")
    root = parts[0]
    verb = "call to" if call else "use of"
    if _monitor(path):
        return Finding(
            "monitor_tampering", f"{verb} {path}: it switches off or side-steps the harness' monitor"
        )
    if _allowed_identity(value, call):
        return None
    if _under(path, sp.TORCH_HOST_ESCAPES) or (
        path.startswith("torch.Tensor.") and parts[2] in sp.TENSOR_HOST_ESCAPE_METHODS
    ):
        return Finding("host_compute", f"{verb} {path}: moves tensor data to the host, out of the op trace")
    if path.startswith("torch.Tensor.") and parts[2] in sp.TENSOR_FINGERPRINT_METHODS:
        return Finding("environment_probe", f"{verb} {path}: a buffer address tells a test from production")
    if root == "builtins":
        return _builtin_rule(value, call)
    dunder = next((p for p in parts[1:] if _is_dunder(p) and p not in policy.DUNDER_ALLOW), None)
    if dunder:
        return Finding("introspection", f"access to {dunder} ({path})")
    if _private(parts) or _internal(path):
        return Finding("runtime_internals", f"{verb} {path}")
    module = sp.MODULE_DISPLAY.get(value.module, value.module)
    found = module_rule(ModuleValue(value.module))
    if found is not None:
        return Finding(found.rule, f"{verb} {path}")
    if root == "os":
        return _os_rule(path, verb)
    if root == "torch":
        if _under(path, sp.TORCH_FILE_IO):
            return Finding("file_io", f"{verb} {path}")
        allowed = sp.TORCH_HOST_CALL_ALLOW if call else sp.TORCH_REFERENCE_ALLOW
        return (
            None
            if path in allowed
            else Finding("torch_compute", f"{verb} {path} (torch compute on the host)")
        )
    if root == "triton":
        if path in sp.TRITON_HOST_ALLOW:
            return None
        return Finding(
            "forbidden_name", f"{verb} {path}: not a launcher API (kernel code belongs in @triton.jit)"
        )
    return _stdlib_rule(module, path, verb)


def _builtin_rule(value: MemberValue, call: bool) -> Finding | None:
    name = value.attrs[0]
    verb = "call to" if call else "use of"
    if name in policy.BUILTIN_RULES:
        return Finding(policy.BUILTIN_RULES[name], f"{verb} builtin {name}")
    if name not in sp.BUILTINS_ALLOW:
        return Finding("introspection", f"{verb} builtin {name} (not on the allow-list)")
    if len(value.attrs) == 1:
        return None
    member = ".".join(value.attrs[:2])
    if member in sp.BUILTIN_DENIED_MEMBERS:
        return Finding("dynamic_name", f"{verb} {member}: format strings can read attributes by name")
    rest = value.attrs[1:]
    if name in sp.BUILTIN_CLASSES_WITH_MEMBERS and not any(p.startswith("_") for p in rest):
        return None
    return Finding("introspection", f"{verb} {'.'.join(value.attrs)}")


def _os_rule(path: str, verb: str) -> Finding | None:
    if path in sp.OS_PATH_PURE or path in policy.OS_ALLOWED:
        return None
    if path in sp.OS_ENVIRONMENT_PROBES or _under(path, frozenset({"os.environ", "os.environb"})):
        return Finding("environment_probe", f"{verb} {path}: the environment tells a test from production")
    if path in sp.OS_MONKEYPATCH:
        return Finding("monkeypatch", f"{verb} {path}")
    name = path.split(".")[1]
    if name in policy.OS_PROCESS or name.startswith(policy.OS_PROCESS_PREFIXES):
        return Finding("process_control", f"{verb} {path}")
    return Finding("file_io", f"{verb} {path}")


def _stdlib_rule(module: str, path: str, verb: str) -> Finding | None:
    if path in sp.STDLIB_DYNAMIC_NAME:
        return Finding("dynamic_name", f"{verb} {path}: it evaluates names or annotations at runtime")
    allowed = sp.STDLIB_ALLOWED_MEMBERS.get(module, frozenset())
    member = path.removeprefix(module + ".").split(".")[0]
    if allowed is None or member in allowed:
        return None
    return Finding("forbidden_name", f"{verb} {path} (not on the allow-list)")


def kernel_allows(value: MemberValue | ModuleValue) -> bool:
    """Whether a kernel body may use `value` (Triton's language and the builtins its compiler knows)."""
    path = value.display
    if path.startswith("builtins."):
        return (
            isinstance(value, MemberValue) and len(value.attrs) == 1 and value.attrs[0] in sp.KERNEL_BUILTINS
        )
    parts = path.split(".")
    if parts[0] != "triton" or _internal(path) or _private(parts):
        return False
    # A Triton name the gate cannot find is not allowed on trust: it could be anything.
    return isinstance(value, ModuleValue) or not missing(real_member(value.module, value.attrs))


def store_rule(value: MemberValue | ModuleValue, written: str) -> Finding:
    """Assigning or deleting into a module or an object reached from one."""
    path = value.display
    if _monitor(path):
        return Finding("monitor_tampering", f"assignment into {path}: it side-steps the harness' monitor")
    return Finding("monkeypatch", f"assignment into {written} ({path})")
