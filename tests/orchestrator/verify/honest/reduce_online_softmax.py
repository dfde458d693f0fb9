"""Honest row softmax whose max and normaliser come from one tl.reduce over (max, sum) pairs: the
online-softmax merge (rescale both sums to the larger max) is associative up to rounding. Padding lanes
carry (-inf, 0); the merge guards -inf - -inf so two padding lanes meeting in a tree stay (-inf, 0)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _merge(m1, s1, m2, s2):
    m = tl.maximum(m1, m2)
    safe = tl.where(m == -float("inf"), 0.0, m)
    return m, s1 * tl.exp(m1 - safe) + s2 * tl.exp(m2 - safe)


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, n_cols, sx0, sx1, so0, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * sx0 + cols * sx1, mask=mask, other=-float("inf")).to(tl.float32)
    m, s = tl.reduce((x, mask.to(tl.float32)), 0, _merge)
    tl.store(out_ptr + row * so0 + cols, (tl.exp(x - m) / s).to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(cols)
    _softmax_kernel[(rows,)](x, out, cols, x.stride(0), x.stride(1), out.stride(0), BLOCK=block)
    return out
