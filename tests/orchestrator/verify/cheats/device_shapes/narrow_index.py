"""Cheat (device shapes): row sums whose element offsets are kept in int16 ("fewer registers"). The
CPU shapes stay below 32768 elements in every layout (24 x 1000, pitch at most 1016), so the
offsets never wrap there; on every device shape the elements past 32767 wrap around.

Old harness (before issue 22 point 4, /tmp/kswarm-base): pass, no flag, on the catalogue sum_rows.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _sum_rows_kernel(x_ptr, out_ptr, n_cols, s0, s1, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        offs = (row * s0 + cols * s1).to(tl.int16)  # int16: wraps past 32767, in every layout
        x = tl.load(x_ptr + offs, mask=cols < n_cols, other=0.0)
        acc += x.to(tl.float32)
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def sum_rows(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty((rows,), dtype=x.dtype, device=x.device)
    block = min(1024, triton.next_power_of_2(cols))
    _sum_rows_kernel[(rows,)](x, out, cols, x.stride(0), x.stride(1), BLOCK=block)
    return out
