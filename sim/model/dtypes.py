"""Element types: the one table of dtype names and their bytes per element.

Weights, activations, the KV cache and the kernel-model shapes all name their element type
with a key of ``DTYPE_BYTES``. The first name of a size is that size's canonical name
(``dtype_name``): bf16 for 2 bytes, fp8 for 1.
"""

from __future__ import annotations

from enum import StrEnum

#: dtype name -> bytes per element (int4 packs two elements in a byte; fp4 is NVFP4 as stored:
#: a 4-bit E2M1 value plus one E4M3 scale per 16 elements, 0.5 + 1/16 bytes; weights only).
DTYPE_BYTES: dict[str, float] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5,
                                 "fp4": 0.5625}


#: weight dtypes a quantized checkpoint stores its transformer layers in
QUANTIZED_WEIGHT_DTYPES = ("fp8", "int8", "int4", "fp4")


def embedding_dtype(weight_dtype: str, embedding: str | None = None) -> str:
    """The dtype of the vocabulary matrices (the token embedding table and the lm_head):
    ``embedding`` when given, else bf16 under quantized weights, else the weights' own.

    FP8 (ModelOpt, compressed-tensors), AWQ/GPTQ int4, NVFP4 and MXFP4 checkpoints quantize the
    transformer layers' linear weights and keep both vocabulary matrices in 16 bits, and vLLM,
    SGLang and TensorRT-LLM load them so (sim/model/weights.py has the startup logs). GGUF files
    (llama.cpp) quantize them as well, and gpt-fast's int8/int4 handlers the lm_head: set it."""
    if embedding is not None:
        return embedding
    return "bf16" if weight_dtype in QUANTIZED_WEIGHT_DTYPES else weight_dtype


def dtype_name(num_bytes: float) -> str:
    """The canonical name of an element size (bf16 for a size the table lacks)."""
    for name, size in DTYPE_BYTES.items():
        if size == num_bytes:
            return name
    return "bf16"


class KVDtype(StrEnum):
    """Element type of the KV cache. int8/int4 carry per-group scales (see kv_bytes_per_token)."""

    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"

    @property
    def bytes_per_element(self) -> float:
        return DTYPE_BYTES[self.value]

    @property
    def has_group_scales(self) -> bool:
        """True for int8/int4: one scale per quant group. fp8 uses per-tensor scales (as vLLM)."""
        return self in (KVDtype.INT8, KVDtype.INT4)


__all__ = ["DTYPE_BYTES", "KVDtype", "QUANTIZED_WEIGHT_DTYPES", "dtype_name", "embedding_dtype"]
