"""Argument checks and small helpers shared by the kernel wrappers.

Nothing here imports triton: the wrappers use these before they launch, and the
checks must read the same whether the kernels run on CUDA or in Triton's
interpreter (``TRITON_INTERPRET=1``, CPU tensors).
"""

from __future__ import annotations

import functools
import os
from typing import Iterable

import torch

#: dtypes that the attention, GEMV and cache kernels accept for activations and KV.
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INDEX_DTYPES = (torch.int32, torch.int64)


def interpreting() -> bool:
    """True when Triton runs kernels in its numpy interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def dot_in_fp32(dtype: torch.dtype) -> bool:
    """Whether a kernel must upcast its ``tl.dot`` operands to fp32.

    Only for bf16 under the interpreter: triton 3.x's interpreter stores bf16 as
    uint16 and its ``tl.dot`` multiplies those raw bits, which gives garbage. On a GPU
    bf16 goes to the tensor cores natively and this returns False.
    """
    return interpreting() and dtype == torch.bfloat16


def dot_precision(dtype: torch.dtype) -> str:
    """``tl.dot``'s input_precision: exact "ieee" for fp32 operands (tests), else the default.

    For fp16/bf16 operands the setting changes nothing; for fp32 it keeps a GPU from
    silently rounding to TF32.
    """
    return "ieee" if dtype == torch.float32 or dot_in_fp32(dtype) else "tf32"


def check_tensor(
    name: str,
    t: object,
    *,
    ndim: int,
    dtypes: Iterable[torch.dtype],
    shape_doc: str,
) -> torch.Tensor:
    """Raise ValueError naming ``name`` unless ``t`` is a tensor of ``ndim`` dims and an allowed dtype."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor {shape_doc}, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dims {shape_doc}, got shape {tuple(t.shape)}")
    dtypes = tuple(dtypes)
    if t.dtype not in dtypes:
        allowed = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise ValueError(f"{name}: dtype {str(t.dtype).removeprefix('torch.')} not supported; allowed: {allowed}")
    return t


def check_dim(name: str, t: torch.Tensor, dim: int, expected: int, what: str) -> None:
    """Raise ValueError unless ``t.shape[dim] == expected``."""
    if t.shape[dim] != expected:
        raise ValueError(f"{name}: shape[{dim}] ({what}) must be {expected}, got {t.shape[dim]} (shape {tuple(t.shape)})")


def check_same_dtype(ref_name: str, ref: torch.Tensor, **others: torch.Tensor) -> None:
    for name, t in others.items():
        if t.dtype != ref.dtype:
            raise ValueError(f"{name}: dtype {t.dtype} must match {ref_name} dtype {ref.dtype}")


def check_devices(**tensors: torch.Tensor) -> torch.device:
    """All tensors on one device: CUDA normally, CPU allowed only under the interpreter."""
    items = list(tensors.items())
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device:
            raise ValueError(f"{name}: on {t.device}, but {first_name} is on {first.device}; all tensors must share a device")
    if first.device.type != "cuda" and not interpreting():
        raise ValueError(
            f"{first_name}: on {first.device}; Triton kernels need CUDA tensors "
            "(or set TRITON_INTERPRET=1 before importing triton to run on CPU)"
        )
    return first.device


def check_last_dim_contiguous(**tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        if t.stride(-1) != 1:
            raise ValueError(f"{name}: last dimension must be contiguous (stride 1), got strides {t.stride()}")


def output_like(out: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """``out`` checked to match ``like`` (shape, dtype, device, contiguous last dim), or a new tensor."""
    if out is None:
        return torch.empty_like(like, memory_format=torch.contiguous_format)
    if not isinstance(out, torch.Tensor) or out.shape != like.shape or out.dtype != like.dtype:
        got = f"{out.dtype} {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"out: must be a {like.dtype} tensor of shape {tuple(like.shape)}, got {got}")
    check_devices(out=out, like=like)
    check_last_dim_contiguous(out=out)
    return out


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors of ``device`` (132 for an H100/H200 SXM; assumed under the interpreter)."""
    if device.type == "cuda":
        return _cuda_sms(device.index if device.index is not None else torch.cuda.current_device())
    return 132


@functools.lru_cache(maxsize=None)
def _cuda_sms(index: int) -> int:
    # Cached: wrappers call this on every launch and must stay cheap on the host.
    return torch.cuda.get_device_properties(index).multi_processor_count


def check_kv_cache(key_cache: torch.Tensor, value_cache: torch.Tensor) -> tuple[int, int, int, int]:
    """Check the paged KV cache pair; return (num_blocks, block_size, num_kv_heads, head_dim).

    Layout (every kernel in this package): ``[num_blocks, block_size, num_kv_heads, head_dim]``;
    token ``t`` of a sequence lives in block ``block_table[t // block_size]`` at row
    ``t % block_size``, i.e. slot ``block_id * block_size + t % block_size``.
    """
    doc = "[num_blocks, block_size, num_kv_heads, head_dim]"
    check_tensor("key_cache", key_cache, ndim=4, dtypes=FLOAT_DTYPES, shape_doc=doc)
    check_tensor("value_cache", value_cache, ndim=4, dtypes=FLOAT_DTYPES, shape_doc=doc)
    if value_cache.shape != key_cache.shape:
        raise ValueError(f"value_cache: shape {tuple(value_cache.shape)} must equal key_cache shape {tuple(key_cache.shape)}")
    check_same_dtype("key_cache", key_cache, value_cache=value_cache)
    check_last_dim_contiguous(key_cache=key_cache, value_cache=value_cache)
    num_blocks, block_size, num_kv_heads, head_dim = key_cache.shape
    if block_size < 1 or block_size & (block_size - 1):
        raise ValueError(f"key_cache: block_size (shape[1]) must be a power of two, got {block_size}")
    return num_blocks, block_size, num_kv_heads, head_dim


def check_head_dim(name: str, head_dim: int) -> None:
    if head_dim not in (16, 32, 64, 128, 256):
        raise ValueError(f"{name}: head_dim must be one of 16, 32, 64, 128, 256, got {head_dim}")
