"""Numeric formats: storage size and which tensor-core rate a GEMM in that format uses."""
from __future__ import annotations

from .errors import InputError

# Bytes per element. fp4 packs two values a byte; its block scales (one fp8 per 16 or 32 values) are
# counted in by the 1/16 byte overhead of NVFP4's 16-value blocks.
BYTES_PER_ELEMENT: dict[str, float] = {
    "fp64": 8.0,
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "fp4": 0.5 + 1.0 / 16.0,
}

# The tensor-core rate a matrix product with operands of this dtype runs at.
TENSOR_RATE_KEY: dict[str, str] = {
    "fp64": "fp64",
    "fp32": "tf32",  # torch allow_tf32 off would use vector fp32; callers pick "fp32_vector" explicitly
    "tf32": "tf32",
    "bf16": "bf16",
    "fp16": "bf16",
    "fp8": "fp8",
    "int8": "int8",
    "fp4": "fp4",
}

DTYPES = tuple(BYTES_PER_ELEMENT)

# Formats weights are stored in but no product runs in (weight-only quantization: dequantized in the kernel's
# mainloop). INT4 with a bf16 scale per 32 values (compressed-tensors' W4A16 groups: Kimi K2's experts).
WEIGHT_ONLY_BYTES: dict[str, float] = {"int4": 0.5 + 2.0 / 32.0}


def bytes_per_element(dtype: str, *, where: str = "dtype") -> float:
    try:
        return BYTES_PER_ELEMENT[dtype] if dtype in BYTES_PER_ELEMENT else WEIGHT_ONLY_BYTES[dtype]
    except KeyError:
        raise InputError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}", field=where) from None


def check_dtype(dtype: str, *, where: str = "dtype") -> str:
    bytes_per_element(dtype, where=where)
    return dtype
