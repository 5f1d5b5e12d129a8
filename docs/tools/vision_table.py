"""The tables of docs/vision.md: the vision encoders of the multimodal configs in tests/data/hf_configs (their
layers, parameters and image tokens by size), and what one image adds to a projection on H200s.

    python docs/tools/vision_table.py          # a few seconds
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "data" / "hf_configs"
# the multimodal configs shipped as fixtures whose vision tower is modelled, and the layout each is projected on
MODELS = (("Qwen--Qwen3-VL-8B-Instruct_config.json", dict(tp=1)),
          ("Qwen--Qwen3-VL-30B-A3B-Instruct_config.json", dict(tp=1)),
          ("google--gemma-3-27b-it_config.json", dict(tp=1)),
          ("Qwen--Qwen3.5-397B-A17B_config.json", dict(tp=4, dtype="fp8")))
SIZES = ((448, 448), (1092, 1092), (1920, 1080))


def _model(file: str):
    from perfmodel.models import model_from_hf_config

    return model_from_hf_config(CONFIGS / file)


def encoders() -> str:
    from perfmodel.scenario import Scenario
    from perfmodel.vision import media

    lines = ["| config | tower | layers x hidden (heads x head_dim), MLP | attention | parameters (with projector) | "
             + " | ".join(f"tokens, {w}x{h}" for w, h in SIZES) + " |",
             "|---|---|---|---|---|" + "---|" * len(SIZES)]
    for file, _ in MODELS:
        v = _model(file).vision
        attn = (f"window {v.window * v.merge} patches a side, full on {list(v.full_layers)}" if v.window else "full")
        if v.deepstack:
            attn += f"; deepstack mergers after layers {list(v.deepstack)}"
        toks = [f"{media(v, Scenario(images=1, image_size=s)).tokens:,}" for s in SIZES]
        lines.append(f"| {file.removesuffix('_config.json')} | {v.config_type or v.kind} ({v.kind}) | {v.layers} x "
                     f"{v.hidden} ({v.heads} x {v.head_dim}), {v.mlp} {v.intermediate} | {attn} | "
                     f"{v.param_count() / 1e6:,.1f}M | " + " | ".join(toks) + " |")
    return "\n".join(lines)


def projections() -> str:
    from perfmodel import project

    size = (1092, 1092)
    lines = ["| config | H200 layout | image tokens | TTFT, text only | TTFT, 1 image | of which encoder | "
             "TPOT, text only -> 1 image | weights per GPU added |",
             "|---|---|---|---|---|---|---|---|"]
    for file, layout in MODELS:
        m = _model(file)
        text = project("h200-sxm", m, isl=512, osl=128, batch=1, **layout)
        img = project("h200-sxm", m, isl=512, osl=128, batch=1, images=1, image_size=size, **layout)
        enc = sum(float(t.total) for t in img.prefill.times if t.op.name.startswith("vision."))
        shown = f"TP{layout['tp']} {layout.get('dtype', 'bf16')}"
        lines.append(f"| {file.removesuffix('_config.json')} | {shown} | {img.scenario.image_tokens:,} | "
                     f"{text.ttft_s * 1e3:.1f} ms | {img.ttft_s * 1e3:.1f} ms | {enc * 1e3:.1f} ms | "
                     f"{text.tpot_s * 1e3:.2f} -> {img.tpot_s * 1e3:.2f} ms | "
                     f"{(img.memory.weights - text.memory.weights) / 1e9:.2f} GB |")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(ROOT))
    print(encoders())
    print()
    print(projections())
