"""The shapes the tuner is validated on: GEMMs of Llama-3.1-8B and -70B layers at decode and prefill
batch sizes, awkward sizes, and a few flash-attention prefills.

Projection shapes (an ``nn.Linear`` of N outputs and K inputs run on M tokens), from the models'
config.json: 8B hidden 4096, 32 heads / 8 KV heads of 128, FFN 14336; 70B hidden 8192, 64 / 8 heads,
FFN 28672 (whole, and one of four tensor-parallel shards). Ordered so that a run cut short by its budget
still covers decode, prefill and awkward shapes.
"""
from __future__ import annotations

# (name, M, N, K)
L8 = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
L70_TP4 = {"qkv": (2560, 8192), "o": (8192, 2048), "gate_up": (14336, 8192), "down": (8192, 7168)}
L70 = {"o": (8192, 8192), "down": (8192, 28672)}

GEMM_SHAPES: list[tuple[str, int, int, int]] = [
    ("8b.qkv.decode1", 1, *L8["qkv"]),
    ("8b.gate_up.prefill2048", 2048, *L8["gate_up"]),
    ("awkward.1000x3000x4000", 1000, 3000, 4000),
    ("8b.down.decode16", 16, *L8["down"]),
    ("8b.o.prefill2048", 2048, *L8["o"]),
    ("70b-tp4.qkv.decode64", 64, *L70_TP4["qkv"]),
    ("awkward.wave.2176x4096x4096", 2176, 4096, 4096),  # 17 x 128 rows: just over a wave of 128x256 tiles
    ("8b.gate_up.decode1", 1, *L8["gate_up"]),
    ("8b.qkv.prefill512", 512, *L8["qkv"]),
    ("70b-tp4.down.prefill2048", 2048, *L70_TP4["down"]),
    ("8b.down.decode1", 1, *L8["down"]),
    ("awkward.77x4096x4096", 77, 4096, 4096),
    ("8b.down.prefill2048", 2048, *L8["down"]),
    ("8b.o.decode16", 16, *L8["o"]),
    ("70b-tp4.gate_up.prefill2048", 2048, *L70_TP4["gate_up"]),
    ("8b.gate_up.decode64", 64, *L8["gate_up"]),
    ("awkward.1x4096x4104", 1, 4096, 4104),
    ("8b.qkv.prefill4096", 4096, *L8["qkv"]),
    ("70b.down.decode16", 16, *L70["down"]),
    ("70b-tp4.o.decode1", 1, *L70_TP4["o"]),
    ("8b.down.prefill512", 512, *L8["down"]),
    ("awkward.3000x5000x6000", 3000, 5000, 6000),
    ("8b.o.decode1", 1, *L8["o"]),
    ("70b.o.prefill1024", 1024, *L70["o"]),
    ("8b.gate_up.decode16", 16, *L8["gate_up"]),
    ("70b-tp4.qkv.prefill2048", 2048, *L70_TP4["qkv"]),
    ("awkward.333x12288x4096", 333, 12288, 4096),
    ("8b.qkv.decode16", 16, *L8["qkv"]),
    ("70b-tp4.down.decode1", 1, *L70_TP4["down"]),
    ("8b.gate_up.prefill512", 512, *L8["gate_up"]),
    ("8b.down.decode64", 64, *L8["down"]),
    ("awkward.4097x1024x1024", 4097, 1024, 1024),
    ("70b-tp4.gate_up.decode16", 16, *L70_TP4["gate_up"]),
    ("8b.o.prefill4096", 4096, *L8["o"]),
]

# (name, batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, causal)
ATTENTION_SHAPES: list[tuple[str, int, int, int, int, int, int, bool]] = [
    ("8b.prefill2048.causal", 1, 32, 8, 2048, 2048, 128, True),
    ("8b.prefill4096x2.causal", 2, 32, 8, 4096, 4096, 128, True),
    ("70b-tp4.prefill2048.causal", 2, 16, 2, 2048, 2048, 128, True),
    ("8b.chunk512.ctx4096", 4, 32, 8, 512, 4096, 128, False),
]

# More layers, for the second H200 run (``--shapes extended``): other models' projections (workloads/models/:
# Llama-2-13B hidden 5120, 40 heads, FFN 13824; Qwen2.5-72B hidden 8192, 64 / 8 heads, FFN 29568, one of
# eight tensor-parallel shards; DeepSeek-V3 hidden 7168, experts of 2048, MLA q_lora 1536 and kv_lora 512 + 64
# rope; Llama-3.1-405B hidden 16384, 128 / 8 heads, FFN 53248, one of eight shards; Mixtral-8x7B experts of
# 14336; Llama-3.1-8B's LM head, vocabulary 128256), at M not in the first set (8, 32, 128, 200, 256, 1024,
# 3072), and awkward sizes: K not a multiple of 16 elements (Triton then cannot prove 16-byte row alignment),
# M one over a tile multiple, a square product below a wave.
L13 = {"qkv": (15360, 5120), "o": (5120, 5120), "gate_up": (27648, 5120), "down": (5120, 13824)}
Q72_TP8 = {"qkv": (1280, 8192), "gate_up": (7392, 8192), "down": (8192, 3696)}
EXTRA_GEMM_SHAPES: list[tuple[str, int, int, int]] = [
    ("13b.qkv.decode8", 8, *L13["qkv"]),
    ("13b.o.prefill1024", 1024, *L13["o"]),
    ("13b.gate_up.decode32", 32, *L13["gate_up"]),
    ("13b.down.prefill3072", 3072, *L13["down"]),
    ("qwen72b-tp8.qkv.decode1", 1, *Q72_TP8["qkv"]),
    ("qwen72b-tp8.gate_up.prefill1024", 1024, *Q72_TP8["gate_up"]),
    ("qwen72b-tp8.down.decode32", 32, *Q72_TP8["down"]),
    ("qwen72b-tp8.down.prefill2048", 2048, *Q72_TP8["down"]),
    ("dsv3.expert.gate_up.m128", 128, 4096, 7168),
    ("dsv3.expert.down.m256", 256, 7168, 2048),
    ("dsv3.q_a.decode32", 32, 1536, 7168),
    ("dsv3.kv_a.prefill4096", 4096, 576, 7168),
    ("405b-tp8.qkv.decode16", 16, 2304, 16384),
    ("405b-tp8.down.prefill1024", 1024, 16384, 6656),
    ("8b.lm_head.decode8", 8, 128256, 4096),
    ("mixtral.expert.gate_up.m200", 200, 28672, 4096),
    ("awkward.1536x1536x1536", 1536, 1536, 1536),
    ("awkward.6000x800x2500", 6000, 800, 2500),
    ("awkward.64x5000x3000", 64, 5000, 3000),
    ("awkward.257x2048x8192", 257, 2048, 8192),
]
EXTRA_ATTENTION_SHAPES: list[tuple[str, int, int, int, int, int, int, bool]] = [
    ("8b.prefill1024.nocausal", 1, 32, 8, 1024, 1024, 128, False),
    ("405b-tp8.prefill8192.causal", 1, 16, 1, 8192, 8192, 128, True),
    ("13b.prefill2048x4.causal", 4, 40, 40, 2048, 2048, 128, True),
    ("8b.chunk1024.ctx16384", 1, 32, 8, 1024, 16384, 128, True),
]


def shape_set(name: str) -> tuple[list, list]:
    """(GEMM shapes, attention shapes) of a named set: ``full`` (the first run's 38) or ``extended``."""
    if name == "extended":
        return GEMM_SHAPES + EXTRA_GEMM_SHAPES, ATTENTION_SHAPES + EXTRA_ATTENTION_SHAPES
    return GEMM_SHAPES, ATTENTION_SHAPES


# tiny shapes for the CPU path (Triton's interpreter, or torch alone)
TINY_GEMM_SHAPES = [("tiny.1x64x128", 1, 64, 128), ("tiny.40x96x160", 40, 96, 160)]
TINY_ATTENTION_SHAPES = [("tiny.attn", 1, 2, 1, 32, 32, 16, True)]
