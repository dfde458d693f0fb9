"""Masked mean cross-entropy with the all-zero-mask case defined as 0 (never 0/0 = NaN).

Kernel 1: one program per row, an online logsumexp over masked blocks of the vocabulary; it writes
ce * mask and mask for the row. Kernel 2: one program sums both and divides only when the mask sum
is positive.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _row_ce_kernel(logits_ptr, targets_ptr, mask_ptr, num_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(logits_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
        x = x.to(tl.float32)
        new_m = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - new_m) + tl.sum(tl.exp(x - new_m), axis=0)
        m = new_m
    target = tl.load(targets_ptr + row)
    picked = tl.load(logits_ptr + row * stride + target).to(tl.float32)
    weight = tl.load(mask_ptr + row)
    ce = m + tl.log(s) - picked
    tl.store(num_ptr + row, tl.where(weight != 0.0, ce * weight, 0.0))


@triton.jit
def _mean_kernel(num_ptr, mask_ptr, out_ptr, n_rows, BLOCK: tl.constexpr):
    num = tl.zeros((BLOCK,), dtype=tl.float32)
    den = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_rows, BLOCK):
        rows = start + tl.arange(0, BLOCK)
        ok = rows < n_rows
        num += tl.load(num_ptr + rows, mask=ok, other=0.0)
        den += tl.load(mask_ptr + rows, mask=ok, other=0.0)
    total = tl.sum(num, axis=0)
    count = tl.sum(den, axis=0)
    safe = tl.where(count > 0.0, count, 1.0)
    tl.store(out_ptr, tl.where(count > 0.0, total / safe, 0.0))


def masked_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # padded logits are read in place (the kernel takes the row stride): no host-side copy
    targets = targets.contiguous()
    mask = mask.contiguous()
    rows, cols = logits.shape
    per_row = torch.empty((rows,), dtype=torch.float32, device=logits.device)
    out = torch.empty((), dtype=torch.float32, device=logits.device)
    block = min(1024, triton.next_power_of_2(cols))
    _row_ce_kernel[(rows,)](logits, targets, mask, per_row, cols, logits.stride(0), BLOCK=block)
    _mean_kernel[(1,)](per_row, mask, out, rows, BLOCK=min(1024, triton.next_power_of_2(rows)))
    return out
