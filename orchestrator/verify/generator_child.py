"""The child side of a counterexample generator's run (counterexample.py). Loaded by the fork server's
bootstrap from source in a fresh fork of the zygote, exactly as a candidate's runner is (forkserver.py):
empty working directory and home, neutral environment, a session of its own, killed at its deadline,
everything it started swept. It imports nothing of the harness.

A generator needs no file, no socket and no process, so before its code runs it gets none:

- resource limits: no new file descriptor (RLIMIT_NOFILE at the ones it holds: stdio and its report
  pipe), no file writes, no core dump, a bounded address space and CPU time, no new process (for a
  worker's non-root uid);
- a seccomp filter (x86_64, aarch64): opening, creating or unlinking files, sockets, exec, fork and
  clone, signals to other processes, ptrace and raising a limit fail with EPERM;
- an audit hook that refuses every audited event (imports of modules not loaded yet, ``open``,
  ``socket.*``, ``subprocess.*``, ``os.*``, ``ctypes.*``, frame and gc access, ...) except the one
  ``exec`` of the generator's own compiled module.

It then runs ``generate(domain, seed)`` and sends back, as one JSON frame on its report pipe, either
``{"inputs": [...]}`` or ``{"error": "..."}``. The parent parses that strictly and decides everything.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import resource
import struct
import sys
from typing import Any

REPORT_FD = 3
ADDRESS_SPACE_HEADROOM = 1 << 30
# seccomp(2) and prctl(2).
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM = 1
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# System calls refused (numbers per architecture). aarch64 has no open/creat/fork/vfork/unlink/rename.
DENIED_SYSCALLS = {
    "x86_64": {
        "open": 2, "creat": 85, "openat": 257, "openat2": 437, "open_by_handle_at": 304,
        "unlink": 87, "unlinkat": 263, "rename": 82, "renameat": 264, "renameat2": 316,
        "truncate": 76, "mkdir": 83, "mkdirat": 258, "link": 86, "symlink": 88,
        "socket": 41, "socketpair": 53, "connect": 42, "bind": 49, "sendto": 44, "sendmsg": 46,
        "execve": 59, "execveat": 322, "fork": 57, "vfork": 58, "clone": 56, "clone3": 435,
        "kill": 62, "tkill": 200, "tgkill": 234, "ptrace": 101, "process_vm_readv": 310,
        "process_vm_writev": 311, "setrlimit": 160, "prlimit64": 302, "pidfd_open": 434,
        "pidfd_getfd": 438, "memfd_create": 319, "mount": 165, "chdir": 80, "fchdir": 81,
    },
    "aarch64": {
        "openat": 56, "openat2": 437, "open_by_handle_at": 265, "unlinkat": 35, "renameat": 38,
        "renameat2": 276, "truncate": 45, "mkdirat": 34, "linkat": 37, "symlinkat": 36,
        "socket": 198, "socketpair": 199, "connect": 203, "bind": 200, "sendto": 206, "sendmsg": 211,
        "execve": 221, "execveat": 281, "clone": 220, "clone3": 435, "kill": 129, "tkill": 130,
        "tgkill": 131, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "setrlimit": 164, "prlimit64": 261, "pidfd_open": 434, "pidfd_getfd": 438,
        "memfd_create": 279, "mount": 40, "chdir": 49, "fchdir": 50,
    },
}  # fmt: skip


def _send(payload: bytes) -> None:
    data = memoryview(b"J" + len(payload).to_bytes(8, "big") + payload)
    while data:
        data = data[os.write(REPORT_FD, data) :]


def _only_report_and_stdio(report_fd: int) -> None:
    """Descriptors 0-2 and the report pipe as 3, nothing else: with RLIMIT_NOFILE at 4, no new one."""
    if report_fd != REPORT_FD:
        os.dup2(report_fd, REPORT_FD)
        os.close(report_fd)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > REPORT_FD:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor


def _limit(cpu_s: int) -> None:
    with open("/proc/self/status", encoding="ascii") as fh:
        vm = next((int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:")), 0)
    limits = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_FSIZE, 0),
        (resource.RLIMIT_CPU, cpu_s),
        (resource.RLIMIT_NPROC, 0),
        (resource.RLIMIT_NOFILE, REPORT_FD + 1),
    ]
    if vm:
        limits.append((resource.RLIMIT_AS, vm + ADDRESS_SPACE_HEADROOM))
    for which, value in limits:
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass  # a limit already lower: it stays


def _seccomp() -> bool:
    """Install the filter (DENIED_SYSCALLS); False where the architecture or kernel has none."""
    machine = platform.machine()
    arch, denied = AUDIT_ARCH.get(machine), DENIED_SYSCALLS.get(machine)
    if arch is None or denied is None:
        return False

    def insn(code: int, jt: int, jf: int, k: int) -> bytes:
        return struct.pack("HBBI", code, jt, jf, k)

    ld, jeq, ret = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K
    prog = [insn(ld, 0, 0, 4), insn(jeq, 1, 0, arch), insn(ret, 0, 0, SECCOMP_RET_ERRNO | EPERM)]
    numbers = sorted(set(denied.values()))
    # The syscall number; one with the x32 bit (or above) is refused outright.
    prog += [insn(ld, 0, 0, 0), insn(0x35, len(numbers) + 1, 0, 0x40000000)]
    for i, number in enumerate(numbers):  # each match jumps to the final "deny"
        prog.append(insn(jeq, len(numbers) - i, 0, number))
    prog += [insn(ret, 0, 0, SECCOMP_RET_ALLOW), insn(ret, 0, 0, SECCOMP_RET_ERRNO | EPERM)]
    code = b"".join(prog)
    buffer = ctypes.create_string_buffer(code)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return int(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0)) == 0


def _audit_hook(allowed_code: object) -> Any:
    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "exec" and args and args[0] is allowed_code:
            return
        raise PermissionError(f"not allowed in a counterexample generator: {event}")

    return hook


def run(plan: dict[str, Any], fd_in: int, fd_out: int, modules: dict[str, Any]) -> int:
    os.close(fd_in)
    _only_report_and_stdio(fd_out)
    try:
        code = compile(str(plan["source"]), "<generator>", "exec")
    except (SyntaxError, ValueError) as exc:
        _send(json.dumps({"error": f"does not compile: {type(exc).__name__}: {exc}"[:600]}).encode())
        os._exit(0)
    domain, seed = plan["domain"], int(plan["seed"])
    _limit(int(plan["cpu_s"]))
    confined = _seccomp()
    dumps, send, leave = json.dumps, _send, os._exit  # held before the generator can replace them
    namespace: dict[str, Any] = {"__name__": "generator", "__builtins__": __builtins__}
    sys.addaudithook(_audit_hook(code))  # from here on, nothing audited happens but the exec below
    try:
        exec(code, namespace)
        generate = namespace.get("generate")
        if not callable(generate):
            raise TypeError("the script defines no generate(domain, seed)")
        text = dumps({"inputs": generate(domain, seed), "seccomp": confined})
    except BaseException as exc:  # the generator's failure, whatever it is, is its answer
        try:
            why = f"{type(exc).__name__}: {exc}"[:600]
        except BaseException:
            why = "an exception that cannot be printed"
        text = dumps({"error": why})
    send(text.encode())
    leave(0)  # no interpreter teardown under the hook and the filter
    return 0
