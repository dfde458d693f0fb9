"""Probe kernels for the interleaved schedules of the cpu pool (test_verify_atomics.py)."""

import triton
import triton.language as tl


@triton.jit
def two_tickets(counter_ptr, out_ptr):
    """Each program draws two tickets; run one after another they are always consecutive."""
    pid = tl.program_id(0)
    first = tl.atomic_add(counter_ptr, 1)
    second = tl.atomic_add(counter_ptr, 1)
    tl.store(out_ptr + 2 * pid, first)
    tl.store(out_ptr + 2 * pid + 1, second)


@triton.jit
def rmw_two_atomics(acc_ptr):
    """Adds 1 with a read (atomic add of 0) and a write (exchange): not one atomic step."""
    old = tl.atomic_add(acc_ptr, 0)
    tl.atomic_xchg(acc_ptr, old + 1)


@triton.jit
def publish(data_ptr, flag_ptr, out_ptr, RELAXED: tl.constexpr, CTA: tl.constexpr):
    """Program 0 stores a value and raises a flag; program 1 waits for the flag and reads the value."""
    pid = tl.program_id(0)
    if pid == 0:
        tl.store(data_ptr, 42)
        if RELAXED:
            tl.atomic_xchg(flag_ptr, 1, sem="relaxed")
        elif CTA:
            tl.atomic_xchg(flag_ptr, 1, scope="cta")
        else:
            tl.atomic_xchg(flag_ptr, 1, sem="release")
    else:
        if RELAXED:
            while tl.atomic_add(flag_ptr, 0, sem="relaxed") == 0:
                pass
        elif CTA:
            while tl.atomic_add(flag_ptr, 0, scope="cta") == 0:
                pass
        else:
            while tl.atomic_add(flag_ptr, 0, sem="acquire") == 0:
                pass
        tl.store(out_ptr, tl.load(data_ptr))


@triton.jit
def publish_load_store(data_ptr, flag_ptr, out_ptr):
    """The same handshake with tl.atomic_store (release) and tl.atomic_load (acquire)."""
    pid = tl.program_id(0)
    if pid == 0:
        tl.store(data_ptr, 42)
        tl.atomic_store(flag_ptr, 1, sem="release")
    else:
        while tl.atomic_load(flag_ptr, sem="acquire") == 0:
            pass
        tl.store(out_ptr, tl.load(data_ptr))


@triton.jit
def wait_forever(flag_ptr):
    """Every program waits for a flag nobody raises: a device deadlocks."""
    while tl.atomic_add(flag_ptr, 0) == 0:
        pass


@triton.jit
def locked_increment(acc_ptr, lock_ptr):
    """A plain read-modify-write under a spin lock with the default (acq_rel) atomics."""
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:
        pass
    tl.store(acc_ptr, tl.load(acc_ptr) + 1)
    tl.atomic_xchg(lock_ptr, 0)
