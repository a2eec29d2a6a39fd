"""scaled_dot_product_attention as the target GPU would run it. On a GPU, torch picks a fused kernel by architecture,
dtype and shape (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, `select_sdp_backend`), and the kernel's outputs
are what stays in memory for backward: the output and its log-sum-exp (and the RNG state), not the B x H x L x L
attention matrix the math fallback materialises. A torch without a GPU cannot ask the device, so a dry run decides
here, in the order the card's row gives (`cards.Row.attention`), with each backend's main conditions, and calls that
backend's operator, whose fake (meta) kernel gives its outputs and whose backward is the fused one:
- flash: compute capability 8.0 or more, fp16 or bf16, no explicit mask, a head size that is a multiple of 8 up to
  256, the same head size for values, no grouped-query broadcast;
- efficient (memory-efficient): compute capability 5.0 or more, fp16, bf16 or fp32, a head size that is a multiple
  of 8 (4 for fp32), the same for values; a boolean mask becomes an additive one of the query's dtype, as torch
  converts it;
- otherwise the math path, as torch runs it (its operators traced one by one).
The backends the program turned off (`torch.backends.cuda.enable_flash_sdp(False)`, `sdpa_kernel`) are not tried.
"""
from __future__ import annotations

import functools
from typing import Any

import torch
from .cards import Card, Row

_aten = torch.ops.aten


def _usable(backend: str, card: Card, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any,
            gqa: bool) -> bool:
    head = q.shape[-1]
    same = v.shape[-1] == head and q.dim() == 4 and k.dim() == 4 and not (gqa and q.shape[1] != k.shape[1])
    if backend == "flash":
        return (torch.backends.cuda.flash_sdp_enabled() and card.capability >= (8, 0) and mask is None and same
                and q.dtype in (torch.float16, torch.bfloat16) and head % 8 == 0 and head <= 256)
    if backend == "efficient":
        return (torch.backends.cuda.mem_efficient_sdp_enabled() and card.capability >= (5, 0) and same
                and q.dtype in (torch.float16, torch.bfloat16, torch.float32)
                and head % (4 if q.dtype == torch.float32 else 8) == 0)
    return False


def choose(row: Row, card: Card, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any, gqa: bool) -> str:
    return next((b for b in row.attention if _usable(b, card, q, k, v, mask, gqa)), "math")


def attend(row: Row, card: Card, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Any = None,
           dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
           enable_gqa: bool = False) -> torch.Tensor:
    """aten::scaled_dot_product_attention on fake CUDA tensors, by the backend the card would choose."""
    backend = choose(row, card, q, k, v, attn_mask, enable_gqa)
    if backend == "flash":
        return _aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, False, scale=scale)[0]
    if backend == "efficient":
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros((), dtype=q.dtype, device=q.device).masked_fill(
                attn_mask.logical_not(), float("-inf"))
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
        return _aten._scaled_dot_product_efficient_attention(q, k, v, attn_mask, grad, dropout_p, is_causal,
                                                             scale=scale)[0]
    return _aten._scaled_dot_product_attention_math(q, k, v, attn_mask, dropout_p, is_causal, None, scale=scale,
                                                    enable_gqa=enable_gqa)[0]


def install(row: Row, card: Card) -> Any:
    """Route aten::scaled_dot_product_attention on CUDA tensors through `attend`, wherever it is called from
    (checkpointing recomputes it inside backward, below any Python mode): a kernel of its own at the AutogradCUDA
    key, where torch's composite kernel would run. The library returned must be kept alive."""
    library = torch.library.Library("aten", "IMPL")
    library.impl("scaled_dot_product_attention", functools.partial(attend, row, card), "AutogradCUDA")
    return library


def _efficient(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """The memory-efficient kernel's outputs as a GPU makes them: its RNG seed and offset are host tensors, with
    dropout or without (aten/src/ATen/native/transformers/cuda/attention.cu, _efficient_attention_forward; the H100
    recordings show none on the device)."""
    out = mode.untraced(func, args, kwargs)
    mode.traced(out[:2])
    return out


def _efficient_backward(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """The memory-efficient kernel's backward, with the temporaries the H100 recordings show around it (torch 2.11,
    fp32; the same pattern at every size recorded): after the three gradients, a contiguous copy of grad_out, two
    fp32 buffers of B x H x L (delta among them), then a workspace of B x H x (L' x the head size rounded up to 64 +
    L' / 16) fp32 values, L' the length rounded up to 64, each freed as the kernel returns."""
    grad_out, query = args[0], args[1]
    out = mode.run(func, args, kwargs)
    tracer, (b, h, length, head) = mode.tracer, query.shape
    stream, rows = tracer.stream, b * h * length * 4
    copy = tracer.alloc(grad_out.numel() * grad_out.element_size())
    first, second = tracer.alloc(rows), tracer.alloc(rows)
    tracer.free(first, rows, stream)
    tracer.free(copy, grad_out.numel() * grad_out.element_size(), stream)
    blocks = -(-length // 64) * 64   # the sequence in whole blocks of 64
    workspace = b * h * (blocks * -(-head // 64) * 64 + blocks // 16) * 4
    scratch = tracer.alloc(workspace)
    tracer.free(second, rows, stream)
    tracer.free(scratch, workspace, stream)
    return out


def _flash(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """The flash kernel's outputs as a GPU makes them (H100, torch 2.11): its RNG seed and offset first, 8 bytes each
    on the device (kept for backward), then the output and its log-sum-exp, then 256 bytes for the kernel's own use;
    the fake kernel's other outputs are nothing on a GPU."""
    out = mode.untraced(func, args, kwargs)
    for state in out[6:8]:
        mode.tracer.storage(state.untyped_storage(), 8)
    mode.traced(out[:2])
    scratch = mode.tracer.alloc(256)   # 256 bytes taken and given back at every size the H100 ran
    mode.tracer.free(scratch, 256, mode.tracer.stream)
    return out


def _flash_backward(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """The flash kernel's backward, with the one temporary the H100 recordings show (torch 2.11, bf16, at every
    size recorded): after the three gradients, B x H x L' x (head size + 1) fp32 values and 256 bytes (dq's
    accumulator and softmax's row sums), L' the length rounded up to 64, freed as the kernel returns."""
    out = mode.run(func, args, kwargs)
    b, h, length, head = args[1].shape
    size = b * h * -(-length // 64) * 64 * (-(-head // 8) * 8 + 1) * 4 + 256
    scratch = mode.tracer.alloc(size)
    mode.tracer.free(scratch, size, mode.tracer.stream)
    return out


KERNELS = {_aten._scaled_dot_product_flash_attention.default: _flash,
           _aten._scaled_dot_product_flash_attention_backward.default: _flash_backward,
           _aten._scaled_dot_product_efficient_attention.default: _efficient,
           _aten._scaled_dot_product_efficient_attention_backward.default: _efficient_backward}
