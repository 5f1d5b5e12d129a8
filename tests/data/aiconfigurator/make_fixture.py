"""Rebuild this fixture from an installed aiconfigurator-core (0.12.0): a few rows of each table the importer
reads, for one system (b200_sxm, TensorRT-LLM), in the package's own folder layout.

    python tests/data/aiconfigurator/make_fixture.py

The rows are NVIDIA's measurements (Apache-2.0; see NOTICE), cut, not changed.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
OUT = HERE / "systems"


def main() -> None:
    from perfmodel.imports.aiconfigurator import find_source

    src = find_source()
    if OUT.exists():
        shutil.rmtree(OUT)
    (OUT / "data").mkdir(parents=True)
    (OUT / "VERSION").write_text(src.version + "\n")
    shutil.copy(src.systems / "query_versions.yaml", OUT / "query_versions.yaml")
    shutil.copy(src.systems / "b200_sxm.yaml", OUT / "b200_sxm.yaml")
    base = src.data / "b200_sxm"
    picks = {
        "gemm/trtllm/1.3.0rc20/gemm_perf.parquet": lambda t: pc.and_(pc.is_in(t["m"], pc.cast([1, 64, 4096], t["m"].type)),
                                                                     pc.is_in(t["n"], pc.cast([4096, 8192], t["n"].type))),
        "attention/trtllm/1.3.0rc20/context_attention_perf.parquet":
            lambda t: pc.and_(pc.equal(t["num_heads"], 32), pc.is_in(t["isl"], pc.cast([1, 1024, 4096], t["isl"].type))),
        "attention/trtllm/1.3.0rc20/generation_attention_perf.parquet":
            lambda t: pc.and_(pc.equal(t["num_heads"], 32), pc.is_in(t["batch_size"], pc.cast([1, 64], t["batch_size"].type))),
        "quantize/trtllm/1.3.0rc20/scale_matrix_perf.parquet": lambda t: pc.equal(t["k"], 8192),
        "comm/trtllm/1.3.0rc20/custom_allreduce_perf.parquet": lambda t: pc.equal(t["num_gpus"], 8),
        "comm/nccl/2.27.3/nccl_perf.parquet": lambda t: pc.equal(t["num_gpus"], 4),
        "moe/trtllm/1.3.0rc20/moe_perf.parquet":
            lambda t: pc.and_(pc.equal(t["num_experts"], 256), pc.equal(t["moe_ep_size"], 8)),
    }
    for rel, keep in picks.items():
        table = pq.read_table(base / rel)
        table = table.filter(keep(table)).slice(0, 60)
        dest = OUT / "data" / "b200_sxm" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, dest)
    # a later version that reuses the gemm table (the package's reuse.yaml mechanism)
    shutil.copytree(base / "gemm/trtllm/1.3.0rc23", OUT / "data/b200_sxm/gemm/trtllm/1.3.0rc23")


if __name__ == "__main__":
    main()
