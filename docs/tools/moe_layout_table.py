"""The MoE training layout table of docs/training.md: DeepSeek-V3 on 256 GPUs, 8-GPU HGX B200 boxes against a
GB200 NVL72 domain, by pipeline depth, expert-parallel width and all-to-all overlap.

    python docs/tools/moe_layout_table.py      # a few seconds
"""
from __future__ import annotations

BASE = dict(gpus=256, tp=1, global_batch=2048, seq=4096, dtype="fp8", recompute="full")
LAYOUTS = ((16, 8, "1f1b", None), (8, 32, "1f1b", None), (8, 32, "1f1b", True), (8, 32, "dualpipe", None),
           (4, 64, "1f1b", None), (4, 64, "1f1b", True))


def table() -> str:
    from perfmodel.train import project_train

    lines = ["| PP | EP | schedule | all-to-all overlap | B200 HGX tok/s/GPU (exposed comm, s) | "
             "GB200 NVL72 tok/s/GPU (exposed comm, s) | HGX / NVL72 |", "|---|---|---|---|---|---|---|"]
    exposed = "communication (exposed, in the pipeline)"
    for pp, ep, schedule, overlap in LAYOUTS:
        cells = []
        for part in ("b200", "gb200"):
            p = project_train(part, "deepseek-v3", pp=pp, ep=ep, schedule=schedule, moe_a2a_overlap=overlap, **BASE)
            cells.append(p)
        hidden = "on" if cells[0].scenario.a2a_hidden else "off"
        lines.append(f"| {pp} | {ep} | {schedule} | {hidden} | {cells[0].tokens_per_s_per_gpu:,.0f} "
                     f"({cells[0].breakdown[exposed]:.1f}) | {cells[1].tokens_per_s_per_gpu:,.0f} "
                     f"({cells[1].breakdown[exposed]:.1f}) | "
                     f"{cells[0].tokens_per_s_per_gpu / cells[1].tokens_per_s_per_gpu:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
