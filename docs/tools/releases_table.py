"""The engine releases whose MoE tables sit beside each imported engine folder (docs/engines.md, block
``release-tables``): per folder, the release it holds itself and the others imported under ``releases/``, the MoE
formats each release's table times, and its kernels for block-scaled fp8 (the format whose kernel the engines changed most).

    python docs/tools/releases_table.py      # under a second
"""
from __future__ import annotations

from perfmodel.cost.table_store import FILE, read_header
from perfmodel.paths import repo_root
from perfmodel.releases import own_release, release_folders, release_key


def _kernels(folder, fmt: str = "fp8_block") -> str:
    header = read_header(folder / FILE)
    kernels = sorted({c["kernel"] for c in header["classes"] if c["key"][0] == "moe" and c["key"][1] == fmt})
    return ", ".join(f"`{k}`" for k in kernels) or "-"


def _formats(folder) -> str:
    header = read_header(folder / FILE)
    return ", ".join(sorted({c["key"][1] for c in header["classes"] if c["key"][0] == "moe"}))


def table() -> str:
    out = ["| engine folder | its own release | block-fp8 MoE kernels | other releases | their MoE formats | "
           "their block-fp8 MoE kernels |", "|---|---|---|---|---|---|"]
    root = repo_root() / "calibration"
    for folder in sorted(p for p in root.iterdir() if (p / "releases").is_dir()):
        others = release_folders(folder)
        if not others:
            continue
        versions = sorted(others, key=release_key)
        out.append(f"| {folder.name} | {own_release(folder)} | {_kernels(folder)} | {', '.join(versions)} | "
                   + "; ".join(f"{v}: {_formats(others[v][0])}" for v in versions) + " | "
                   + "; ".join(f"{v}: {_kernels(others[v][0])}" for v in versions) + " |")
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


def markdown() -> str:
    return table() + "\n\n" + example()


if __name__ == "__main__":
    print(markdown())
