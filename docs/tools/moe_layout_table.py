"""The MoE training layout table of docs/training.md: DeepSeek-V3 on 256 GPUs, 8-GPU HGX B200 boxes against a
GB200 NVL72 domain, by pipeline depth, expert-parallel width, all-to-all overlap and token dispatcher.

    python docs/tools/moe_layout_table.py      # a few seconds
"""
from __future__ import annotations

BASE = dict(gpus=256, tp=1, global_batch=2048, seq=4096, dtype="fp8", recompute="full")
# (PP, EP, schedule, all-to-all overlap (None: the schedule's), token dispatcher)
LAYOUTS = ((16, 8, "1f1b", None, "alltoall"), (8, 32, "1f1b", None, "alltoall"), (8, 32, "1f1b", True, "alltoall"),
           (8, 32, "dualpipe", None, "alltoall"), (4, 64, "1f1b", None, "alltoall"), (4, 64, "1f1b", True, "alltoall"),
           (16, 8, "1f1b", None, "deepep"), (8, 32, "1f1b", None, "deepep"), (8, 32, "1f1b", True, "deepep"),
           (4, 64, "1f1b", True, "deepep"))


def table() -> str:
    from perfmodel.train import project_train

    lines = ["| PP | EP | schedule | all-to-all overlap | dispatcher | B200 HGX tok/s/GPU (exposed comm, s) | "
             "GB200 NVL72 tok/s/GPU (exposed comm, s) | HGX / NVL72 |", "|---|---|---|---|---|---|---|---|"]
    exposed = "communication (exposed, in the pipeline)"
    for pp, ep, schedule, overlap, dispatcher in LAYOUTS:
        cells = []
        for part in ("b200", "gb200"):
            p = project_train(part, "deepseek-v3", pp=pp, ep=ep, schedule=schedule, moe_a2a_overlap=overlap,
                              moe_dispatcher=dispatcher, **BASE)
            cells.append(p)
        hidden = "on" if cells[0].scenario.a2a_hidden else "off"
        lines.append(f"| {pp} | {ep} | {schedule} | {hidden} | {dispatcher} | {cells[0].tokens_per_s_per_gpu:,.0f} "
                     f"({cells[0].breakdown[exposed]:.1f}) | {cells[1].tokens_per_s_per_gpu:,.0f} "
                     f"({cells[1].breakdown[exposed]:.1f}) | "
                     f"{cells[0].tokens_per_s_per_gpu / cells[1].tokens_per_s_per_gpu:.2f} |")
    return "\n".join(lines)


# Megatron-Bridge-like layouts on 256 GPUs: (model, HGX B200 layout, GB200 NVL72 layout), each (PP, EP, schedule,
# interleave)
PAIRS = (("deepseek-v3", (16, 8, "1f1b", 1), (4, 64, "interleaved", 4)),
         ("qwen3-235b-a22b", (8, 8, "1f1b", 1), (4, 32, "1f1b", 1)))
PAIR_BASE = dict(gpus=256, tp=1, global_batch=2048, seq=4096, dtype="fp8", fp8_recipe="mxfp8", recompute="full")


def pairs_table() -> str:
    """Each model at an HGX B200 layout against an NVL72 one, per GPU, under each dispatcher and under the one
    Megatron-Bridge's recipe runs on each part (``auto``)."""
    from perfmodel.train import project_train

    lines = ["| model | HGX B200 layout | GB200 NVL72 layout | dispatcher | HGX tok/s/GPU | NVL72 tok/s/GPU | "
             "HGX / NVL72 |", "|---|---|---|---|---|---|---|"]
    for model, hgx, nvl in PAIRS:
        for dispatcher in ("alltoall", "deepep", "hybridep", "auto"):
            runs, names = [], []
            for part, (pp, ep, schedule, v) in (("b200", hgx), ("gb200", nvl)):
                p = project_train(part, model, pp=pp, ep=ep, schedule=schedule, interleave=v,
                                  moe_dispatcher=dispatcher, **PAIR_BASE)
                runs.append(p)
                names.append(p.scenario.moe_dispatcher)
            label = dispatcher if dispatcher != "auto" else f"auto ({names[0]} / {names[1]})"
            lines.append(f"| {model} | PP {hgx[0]} EP {hgx[1]} | PP {nvl[0]} EP {nvl[1]}"
                         f"{f' v{nvl[3]}' if nvl[2] == 'interleaved' else ''} | {label} | "
                         f"{runs[0].tokens_per_s_per_gpu:,.0f} | {runs[1].tokens_per_s_per_gpu:,.0f} | "
                         f"{runs[0].tokens_per_s_per_gpu / runs[1].tokens_per_s_per_gpu:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
    print()
    print(pairs_table())
