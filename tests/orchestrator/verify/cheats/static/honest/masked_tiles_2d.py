"""Honest 2-D elementwise add over masked tiles (rows and columns that are not block multiples)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _add_tile_kernel(x_ptr, y_ptr, out_ptr, rows, cols, sx, sy, so, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < rows) & (rn[None, :] < cols)
    x = tl.load(x_ptr + rm[:, None] * sx + rn[None, :], mask=mask, other=0.0)
    y = tl.load(y_ptr + rm[:, None] * sy + rn[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + rm[:, None] * so + rn[None, :], x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if x.dim() != 2 or x.shape != y.shape:
        raise ValueError(f"expected two matrices of one shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    x = x.contiguous()
    y = y.contiguous()
    rows, cols = x.shape
    out = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    bm, bn = 16, 64
    grid = (triton.cdiv(rows, bm), triton.cdiv(cols, bn))
    _add_tile_kernel[grid](x, y, out, rows, cols, x.stride(0), y.stride(0), out.stride(0), BM=bm, BN=bn)
    return out
