"""The engine releases whose tables sit beside each imported engine folder (docs/engines.md, block
``release-tables``): per folder, the release it holds itself, then each other release imported under ``releases/``:
the families its tables price, the MoE formats it times, its kernels for block-scaled fp8 (the format whose kernel
the engines changed most) and the engine's own all-reduce kernels it times.

    python docs/tools/releases_table.py      # under a second
"""
from __future__ import annotations

from perfmodel.cost.comm_tables import engine_kernels
from perfmodel.cost.table_store import FILE, read_header
from perfmodel.paths import repo_root
from perfmodel.releases import own_release, release_folders, release_key


def _moe_classes(folder) -> list[dict]:
    if not (folder / FILE).is_file():
        return []
    return [c for c in read_header(folder / FILE)["classes"] if c["key"][0] == "moe"]


def _kernels(folder, fmt: str = "fp8_block") -> str:
    kernels = sorted({c["kernel"] for c in _moe_classes(folder) if c["key"][1] == fmt})
    return ", ".join(f"`{k}`" for k in kernels) or "-"


def _formats(folder) -> str:
    return ", ".join(sorted({c["key"][1] for c in _moe_classes(folder)})) or "-"


def _all_reduce(folder) -> str:
    return ", ".join(f"`{k}`" for k in sorted(engine_kernels(folder))) or "-"


def table() -> str:
    out = ["| engine folder | release | its tables price | MoE formats | block-fp8 MoE kernels | the engine's "
           "all-reduce kernels |", "|---|---|---|---|---|---|"]
    root = repo_root() / "calibration"
    for folder in sorted(p for p in root.iterdir() if (p / "releases").is_dir()):
        others = release_folders(folder)
        if not others:
            continue
        out.append(f"| {folder.name} | {own_release(folder)} (its own) | every family | {_formats(folder)} | "
                   f"{_kernels(folder)} | {_all_reduce(folder)} |")
        for v in sorted(others, key=release_key):
            path, families = others[v]
            moe = "moe" in families
            out.append(f"| | {v} | {', '.join(sorted(families))} | {_formats(path) if moe else '-'} | "
                       f"{_kernels(path) if moe else '-'} | {_all_reduce(path) if 'comm' in families else '-'} |")
    return "\n".join(out)


# MiniMax-M2.5's MoE layer at TP 2 (hidden 3072, 256 experts, top 8, 1536 wide: 768 a rank), its router's skew
# as aiconfigurator times it for such models (power law 1.2)
EXAMPLE = {"hidden": 3072, "width": 768, "experts": 256, "top_k": 8, "ep": 1, "routing": "power_law_1.2"}
EXAMPLE_TOKENS = (4, 16, 64, 256, 1024)


def example() -> str:
    """The measured module time of EXAMPLE per release of vLLM's B200 tables (ms, as imported)."""
    from perfmodel.cost.tables import folder_classes

    folder = repo_root() / "calibration" / "b200-vllm"
    releases = {own_release(folder): folder, **{v: p for v, (p, _) in release_folders(folder).items()}}
    e = EXAMPLE
    out = ["| vLLM release (B200 tables) | kernel | " + " | ".join(f"{t} tokens" for t in EXAMPLE_TOKENS) + " |",
           "|---|---|" + "---|" * len(EXAMPLE_TOKENS)]
    for version in sorted(releases, key=release_key):
        for c in folder_classes(releases[version]) or []:
            if c.key != ("moe", "fp8_block", e["routing"]):
                continue
            cells = []
            for t in EXAMPLE_TOKENS:
                want = [t, e["hidden"], e["width"], e["experts"] / e["ep"], e["top_k"], e["ep"]]
                hit = [i for i, d in enumerate(c.dims) if list(d) == want]
                cells.append(f"{c.times[hit[0]] * 1e3:.3f} ms" if hit else "-")
            if any(x != "-" for x in cells):
                out.append(f"| {version} | `{c.kernel}` | " + " | ".join(cells) + " |")
    return "\n".join(out)


# the engine's all-reduce of one decode step's activations at 8 GPUs (hidden 4096 in bf16: 4, 32 and 256 tokens)
AR_WORLD = 8
AR_BYTES = (32 * 2**10, 256 * 2**10, 2 * 2**20)


def all_reduce_example() -> str:
    """The engine's own all-reduce (its CUDA-graph series) at :data:`AR_BYTES` on :data:`AR_WORLD` GPUs, per
    release of each engine's B200 and H200 folders (us, as imported)."""
    import numpy as np

    from perfmodel.cost.comm_tables import ENGINE_SERIES, points

    root = repo_root() / "calibration"
    out = ["| engine folder | release | " + " | ".join(f"{b // 2**10} KiB" for b in AR_BYTES) + " |",
           "|---|---|" + "---|" * len(AR_BYTES)]
    for name in ("b200-sglang", "h200-sxm-sglang", "b200-trtllm", "h200-sxm-trtllm", "b200-vllm", "h200-sxm-vllm"):
        folder = root / name
        comm = {v: p for v, (p, fams) in release_folders(folder).items() if "comm" in fams}
        for version in sorted({own_release(folder), *comm}, key=release_key):
            series = points(str(comm.get(version, folder))).get((ENGINE_SERIES, AR_WORLD))
            if series is None:
                continue
            cells = [f"{np.exp(np.interp(np.log(b), *series)) * 1e6:.1f} us" for b in AR_BYTES]
            out.append(f"| {name} | {version} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def markdown() -> str:
    return table() + "\n\n" + example() + "\n\n" + all_reduce_example()


if __name__ == "__main__":
    print(markdown())
