"""Kernels for the in-process tests of test_verify_unspecified.py (imported with TRITON_INTERPRET=1)."""

import triton
import triton.language as tl


@triton.jit
def avg(a, b):
    return (a + b) * 0.5


@triton.jit
def add(a, b):
    return a + b


@triton.jit
def xor(a, b):
    return a ^ b


@triton.jit
def reduce_kernel(x_ptr, o_ptr, B: tl.constexpr, MODE: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, B))
    if MODE == 0:
        r = tl.reduce(x, 0, avg)
    elif MODE == 1:
        r = tl.reduce(x, 0, add)
    else:
        # no tl.sum: a jit of triton.language, decorated when pytest imported Triton uninterpreted
        r = tl.reduce(tl.associative_scan(x.to(tl.int32), 0, xor), 0, add).to(tl.float32)
    tl.store(o_ptr, r)


@triton.jit
def hint_kernel(x_ptr, n, B: tl.constexpr, MODE: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    if MODE == 0:
        tl.assume(n > 1000)
    elif MODE == 1:
        tl.max_constancy(offs // 2, 2)  # true: pairs of equal values
    elif MODE == 2:
        tl.max_constancy(offs // 2, 4)  # false
    elif MODE == 3:
        tl.max_contiguous(tl.multiple_of(offs, B), B)  # true, masked lanes included
    tl.load(x_ptr + offs, mask=offs < n)


@triton.jit
def restore_kernel(x_ptr, B: tl.constexpr):
    offs = tl.arange(0, B)
    x = tl.load(x_ptr + offs)
    tl.store(x_ptr + offs, x + 1)
    tl.store(x_ptr + offs, x)
