"""Triton kernels of kvsim (paged attention, prefill, KV cache writes, decode GEMV, block copies).

Public functions are imported lazily on first attribute access, so ``import kernels``
does no work and does not import torch or triton. Each kernel lives in its own module,
named apart from its function (``kernels.paged_decode.paged_attention_decode``) so that
importing a submodule never shadows a re-exported function. See kernels/README.md.

May import: torch and triton only; nothing else of kvsim.
"""

from importlib import import_module

_PUBLIC = {
    "paged_attention_decode": "kernels.paged_decode",
    "prefill_attention": "kernels.prefill",
    "write_kv_cache": "kernels.kv_write",
    "decode_gemv": "kernels.gemv",
    "gather_blocks": "kernels.block_copy",
    "scatter_blocks": "kernels.block_copy",
    "copy_blocks": "kernels.block_copy",
    "swap_out_blocks": "kernels.block_copy",
    "swap_in_blocks": "kernels.block_copy",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'kernels' has no attribute {name!r}")
