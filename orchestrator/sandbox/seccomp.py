"""A seccomp filter for sandboxed commands: the syscalls a kernel job or an agent never needs, denied.

Denied with EPERM: ``ptrace`` and cross-process memory access, every way to mount or re-root
(``mount``, ``umount2``, ``pivot_root``, ``chroot`` and the new mount API), namespace creation and
entry (``unshare``, ``setns``, ``clone`` with any ``CLONE_NEW*`` flag), the kernel keyring, ``bpf``,
``perf_event_open``, ``userfaultfd``, module and kexec loading, ``open_by_handle_at``. ``clone3``
answers ENOSYS, as under Docker: its flags live in memory the filter cannot read, and libc then falls
back to ``clone``. Syscalls of another ABI (i386 ``int 0x80``, x32) are denied as a whole, so the
numbers above cannot be reached under other names. Everything else is allowed: this is a deny list
of what the sandbox's other walls rely on, not a profile of the harness.
"""

from __future__ import annotations

import ctypes
import errno
import platform

from orchestrator.sandbox.mounts import PR_SET_NO_NEW_PRIVS, check, libc

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
LD_ABS_W, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
X32_BIT = 0x40000000
CLONE_NEW_ANY = 0x7E020000  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
CLONE3 = 435

ARCHES = {  # machine -> (AUDIT_ARCH_*, clone's number, {denied syscall: number})
    "x86_64": (
        0xC000003E,
        56,
        {
            "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "mount": 165,
            "umount2": 166, "pivot_root": 155, "chroot": 161, "open_tree": 428, "move_mount": 429,
            "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
            "unshare": 272, "setns": 308, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
            "perf_event_open": 298, "userfaultfd": 323, "init_module": 175, "finit_module": 313,
            "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320, "open_by_handle_at": 304,
        },
    ),
    "aarch64": (
        0xC00000B7,
        220,
        {
            "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "mount": 40,
            "umount2": 39, "pivot_root": 41, "chroot": 51, "open_tree": 428, "move_mount": 429,
            "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
            "unshare": 97, "setns": 268, "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280,
            "perf_event_open": 241, "userfaultfd": 282, "init_module": 105, "finit_module": 273,
            "delete_module": 106, "kexec_load": 104, "kexec_file_load": 294, "open_by_handle_at": 265,
        },
    ),
}  # fmt: skip
SUMMARY = (
    "denied: ptrace, mount/pivot_root/chroot, new namespaces and setns, keyrings, bpf, perf_event_open, "
    "userfaultfd, modules, kexec, open_by_handle_at, foreign ABIs"
)


class SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def program(machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The classic-BPF program (code, jt, jf, k) for ``machine`` (default: this one)."""
    machine = machine or platform.machine()
    if machine not in ARCHES:
        raise OSError(errno.ENOSYS, f"seccomp: no syscall table for {machine}")
    arch, clone, denied = ARCHES[machine]
    deny = RET_ERRNO | errno.EPERM
    prog = [(LD_ABS_W, 0, 0, 4), (JEQ_K, 1, 0, arch), (RET_K, 0, 0, deny), (LD_ABS_W, 0, 0, 0)]
    if machine == "x86_64":
        prog += [(JGE_K, 0, 1, X32_BIT), (RET_K, 0, 0, deny)]
    for number in sorted(denied.values()):
        prog += [(JEQ_K, 0, 1, number), (RET_K, 0, 0, deny)]
    prog += [(JEQ_K, 0, 1, CLONE3), (RET_K, 0, 0, RET_ERRNO | errno.ENOSYS)]
    # clone: its flags are args[0]; the low 32 bits sit at offset 16 (little-endian).
    prog += [(JEQ_K, 0, 3, clone), (LD_ABS_W, 0, 0, 16), (JSET_K, 0, 1, CLONE_NEW_ANY), (RET_K, 0, 0, deny)]
    return [*prog, (RET_K, 0, 0, RET_ALLOW)]


def install() -> None:
    """Install the filter on this thread (inherited by its children and across execve)."""
    c = libc()
    check(c.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    prog = program()
    filters = (SockFilter * len(prog))(*[SockFilter(*insn) for insn in prog])
    fprog = SockFprog(len(prog), ctypes.cast(filters, ctypes.POINTER(SockFilter)))
    check(c.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "prctl(SECCOMP)")
