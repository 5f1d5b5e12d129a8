"""What SGLang's defaults for Gated DeltaNet models (docs/engines.md) do to a projection: Qwen3.5-397B-A17B in fp8
at TP 8 under SGLang, one static decode batch of 1,024 + 1,024 tokens, with the engine's own defaults for the model
(synchronous scheduling; Triton attention on B200/B300) and with each taken back to the preset's.

    python docs/tools/model_defaults_check.py      # 27 projections (three parts, batches and variants): seconds
"""
from __future__ import annotations

PARTS = ("h200", "b200", "b300")
BATCHES = (4, 64, 256)
VARIANTS = (("the model's defaults", {}),
            ("asynchronous scheduling", {"async_scheduling": True}),
            ("and the preset's attention", {"async_scheduling": True, "attention_kernel": "preset"}))


def markdown() -> str:
    from perfmodel.engines import ENGINES
    from perfmodel.projection import project_resolved
    from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile, resolve_scenario
    from perfmodel.scenario import Scenario

    model = resolve_model("qwen3.5-397b-a17b")
    lines = ["| part | batch | " + " | ".join(f"TPOT, {name} (ms)" for name, _ in VARIANTS) + " |",
             "|---" * (2 + len(VARIANTS)) + "|"]
    for part in PARTS:
        hw = resolve_hardware(part)
        prof = resolve_profile(None, hw, "sglang")
        for batch in BATCHES:
            cells = []
            for _, kw in VARIANTS:
                kw = {k: (ENGINES["sglang"].attention_for(hw.generation) if v == "preset" else v) for k, v in kw.items()}
                sc = resolve_scenario(Scenario(engine="sglang", tp=8, dtype="fp8", batch=batch, isl=1024, osl=1024,
                                               batching="static", **kw).validated(), hw, model)
                cells.append(f"{project_resolved(hw, model, sc, prof).tpot_s * 1e3:.2f}")
            lines.append(f"| {hw.name} | {batch} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
