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

# tiny shapes for the CPU path (Triton's interpreter, or torch alone)
TINY_GEMM_SHAPES = [("tiny.1x64x128", 1, 64, 128), ("tiny.40x96x160", 40, 96, 160)]
TINY_ATTENTION_SHAPES = [("tiny.attn", 1, 2, 1, 32, 32, 16, True)]
