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


if __name__ == "__main__":
    print(table())
