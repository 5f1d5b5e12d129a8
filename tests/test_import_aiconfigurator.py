"""The aiconfigurator-core importer on a fixture cut from the real tables (tests/data/aiconfigurator)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from perfmodel.cli import main  # noqa: E402
from perfmodel.errors import InputError  # noqa: E402
from perfmodel.imports import aiconfigurator as aic  # noqa: E402

FIXTURE = Path(__file__).parent / "data" / "aiconfigurator" / "systems"


@pytest.fixture(scope="module")
def src():
    return aic.find_source(FIXTURE)


def _rows(folder: Path) -> list[dict]:
    with gzip.open(folder / "measurements.jsonl.gz", "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def test_finds_the_fixture_and_its_versions(src):
    assert src.version == "0.12.0"
    assert aic.current_version(src, "b200_sxm", "trtllm") == "1.3.0rc20"
    # 1.3.0rc23 holds only a reuse.yaml naming 1.3.0rc20's gemm table: the reuse is followed
    path, used = aic.find_table(src, "b200_sxm", "gemm", "trtllm", "gemm_perf", "1.3.0rc23")
    assert used == "1.3.0rc20" and path.name == "gemm_perf.parquet"
    assert aic.find_table(src, "b200_sxm", "gemm", "vllm", "gemm_perf", None) is None


def test_import_converts_every_family_with_provenance(src, tmp_path):
    prov = aic.import_system(src, "b200_sxm", "trtllm", tmp_path)
    rows = _rows(tmp_path)
    assert prov["rows"] == len(rows) > 0
    env = json.loads((tmp_path / "environment.json").read_text())
    assert env["env"]["spec_key"] == "b200" and env["env"]["engine"] == "trtllm"
    assert env["import"]["package_version"] == "0.12.0"
    assert set(env["import"]["tables"]) >= {"gemm_perf", "context_attention_perf", "generation_attention_perf",
                                            "nccl_perf", "custom_allreduce_perf", "moe_perf"}
    kinds = {(r["kind"], r["params"].get("op")) for r in rows}
    assert {("instream", "gemm"), ("instream", "attention"), ("instream", "quantize"), ("collective", "all_reduce"),
            ("moe", "moe")} <= kinds
    gemm = [r for r in rows if r["params"].get("op") == "gemm"]
    # the table's ms become seconds; quantized formats quantize their input inside the module
    by_fmt = {(r["params"]["dtype"], r["params"].get("scaling")) for r in gemm}
    assert ("bf16", None) in by_fmt and ("fp4", "nvfp4") in by_fmt and ("fp8", "block") in by_fmt
    assert all(r["params"].get("quant_input") == (r["params"]["dtype"] != "bf16") or
               (r["params"]["dtype"] == "bf16" and "quant_input" not in r["params"]) for r in gemm)
    assert all(1e-7 < r["time_s"] < 1.0 for r in rows)
    attn = [r["params"] for r in rows if r["params"].get("op") == "attention"]
    decode = [p for p in attn if p["seq_q"] == 1]
    assert decode and all(p["packed"] and not p["causal"] and p["seq_kv"] >= 2 for p in decode)
    assert all(p["causal"] and p["seq_q"] >= 2 for p in attn if not p["packed"])
    # what could not be expressed is counted, with its reason
    skipped = env["import"]["tables"]["context_attention_perf"]["skipped"]
    assert any("one-token context" in why for why in skipped)
    nccl = [r["params"] for r in rows if r["kind"] == "collective" and r["params"]["backend"] == "nccl"]
    half = [p for p in nccl if p["dtype"] == "half"]
    assert half and all(p["bytes"] % 2 == 0 for p in half)  # message_size counts elements


def test_import_is_deterministic_and_subsamples_by_stratum(src, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    aic.import_system(src, "b200_sxm", "trtllm", a, rows_per_table=20, families=["gemm"])
    aic.import_system(src, "b200_sxm", "trtllm", b, rows_per_table=20, families=["gemm"])
    assert (a / "measurements.jsonl.gz").read_bytes() == (b / "measurements.jsonl.gz").read_bytes()
    rows = [r for r in _rows(a) if r["params"].get("op") == "gemm"]  # the quantize table is small: kept whole
    assert len(rows) == 20
    assert len({(r["params"]["dtype"], r["params"].get("scaling")) for r in rows}) == 4  # every format kept


def test_the_whole_tables_hold_every_converted_row_of_every_kernel(src, tmp_path):
    """tables.npz holds each table whole (the fit's subsample is cut from it), every kernel family apart, the same
    bytes for the same import."""
    from perfmodel.cost import tables as T
    from perfmodel.cost.table_store import FILE, decode, quantization_error

    a = tmp_path / "a"
    prov = aic.import_system(src, "b200_sxm", "trtllm", a, rows_per_table=20)
    first = (a / FILE).read_bytes()
    aic.import_system(src, "b200_sxm", "trtllm", a, rows_per_table=20)
    assert (a / FILE).read_bytes() == first
    classes, provenance = decode(a / FILE)
    assert provenance["system"] == "b200_sxm" and prov["whole_tables"]["rows"] == sum(len(c) for c in classes)
    sub = T.classes_of(_rows(a))  # the subsample: every row is in the whole tables, at its time
    whole = {(c.key, c.kernel): {tuple(d): t for d, t in zip(c.dims.tolist(), c.times.tolist())} for c in classes}
    assert sum(len(c) for c in classes) > sum(len(c) for c in sub)
    for c in sub:
        got = whole[(c.key, c.kernel)]
        for d, t in zip(c.dims.tolist(), c.times.tolist()):
            assert got[tuple(d)] == pytest.approx(t, rel=quantization_error() * 1.01)
    # every kernel's rows: the real B200 table's NVFP4 MoE keeps CUTLASS beside min-latency (tests/test_tables.py)
    assert {(c.key, c.kernel) for c in sub} <= set(whole)


def test_subsample_spreads_over_strata():
    rows = [{"id": f"a{i}", "g": "big"} for i in range(100)] + [{"id": f"b{i}", "g": "small"} for i in range(3)]
    kept = aic.subsample(rows, lambda r: (r["g"],), 13, seed=0)
    assert len(kept) == 13 and sum(r["g"] == "small" for r in kept) == 3


def test_fit_makes_a_profile_for_the_part_and_engine(src, tmp_path):
    from perfmodel.fit.directory import fit_directory
    from perfmodel.profile import load_profile

    aic.import_system(src, "b200_sxm", "trtllm", tmp_path)
    fit_directory(tmp_path)
    prof = load_profile(tmp_path)
    assert prof.fitted and prof.spec_key == "b200" and prof.engine == "trtllm"
    assert "trtllm" in prof.attn_eta and "fp4" in prof.gemm_prologue_s
    assert set(prof.provenance["measured_families"]) >= {"gemm", "attention", "comm", "moe"}
    assert "memory" not in prof.provenance["measured_families"]  # its quantize kernel travels with the GEMMs
    assert "quantize" in prof.provenance["module_kernels"]
    assert prof.provenance["import"]["system"] == "b200_sxm"
    assert any(k.startswith("engine_all_reduce:") for k in prof.comm_eta)  # TensorRT-LLM's own all-reduce


def test_bad_input_is_one_line(src, tmp_path, capsys):
    with pytest.raises(InputError, match="unknown system"):
        aic.import_system(src, "nope", "trtllm", tmp_path)
    with pytest.raises(InputError, match="not an aiconfigurator systems folder"):
        aic.find_source(tmp_path)
    assert main(["import", "aiconfigurator", "--data", str(tmp_path), "--system", "b200_sxm",
                 "--engine", "trtllm"]) == 2
    assert main(["import", "aiconfigurator", "--data", str(FIXTURE), "--list"]) == 0
    assert "b200_sxm" in capsys.readouterr().out
