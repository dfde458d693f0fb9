"""Embedding lookup over blocks of tokens that tells the compiler the gathered rows are contiguous
("ids are mostly consecutive in a prompt": max_contiguous lets it coalesce the row reads). They repeat
and jump; a device would read the wrong rows.
Old harness (before issue 22 point 2): pass, every trial, no flag (hints were stored, never read).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _embedding_kernel(
    w_ptr, ids_ptr, out_ptr, n, dim, w_stride, out_stride, TOK: tl.constexpr, BLOCK: tl.constexpr
):
    toks = tl.program_id(0) * TOK + tl.arange(0, TOK)
    cols = tl.arange(0, BLOCK)
    tmask = toks < n
    rows = tl.load(ids_ptr + toks, mask=tmask, other=0)
    rows = tl.max_contiguous(rows, TOK)
    mask = tmask[:, None] & (cols[None, :] < dim)
    values = tl.load(w_ptr + rows[:, None] * w_stride + cols[None, :], mask=mask)
    tl.store(out_ptr + toks[:, None] * out_stride + cols[None, :], values, mask=mask)


def embedding(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    weight = weight.contiguous()
    ids = ids.contiguous()
    n = ids.numel()
    dim = weight.shape[1]
    out = torch.empty((n, dim), dtype=weight.dtype, device=weight.device)
    tok = 8
    grid = (triton.cdiv(n, tok),)
    _embedding_kernel[grid](
        weight, ids, out, n, dim, weight.stride(0), out.stride(0), TOK=tok, BLOCK=triton.next_power_of_2(dim)
    )
    return out
