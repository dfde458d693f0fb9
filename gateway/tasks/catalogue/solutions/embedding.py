"""Embedding gather: one program per (token, block of columns); rows are read from the table."""

import torch
import triton
import triton.language as tl


@triton.jit
def _embedding_kernel(w_ptr, ids_ptr, out_ptr, dim, w_stride, out_stride, BLOCK: tl.constexpr):
    token = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < dim
    row = tl.load(ids_ptr + token)
    values = tl.load(w_ptr + row * w_stride + cols, mask=mask)
    tl.store(out_ptr + token * out_stride + cols, values, mask=mask)


def embedding(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    # a padded table is read in place (the kernel takes its row stride): no host-side copy
    n = ids.numel()
    dim = weight.shape[1]
    out = torch.empty((n, dim), dtype=weight.dtype, device=weight.device)
    block = min(256, triton.next_power_of_2(dim))
    grid = (n, triton.cdiv(dim, block))
    _embedding_kernel[grid](weight, ids, out, dim, weight.stride(0), out.stride(0), BLOCK=block)
    return out
