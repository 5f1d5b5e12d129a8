"""Gated DeltaNet's chunked prefill as a scan (perfmodel.cost.scan), its fit (perfmodel.fit.deltanet), the engines'
imported gdn tables (perfmodel.imports.aiconfigurator.convert_gdn) and the evidence that picks it."""
from __future__ import annotations

import numpy as np
import pytest

from perfmodel.cost.scan import CHUNK, scan_time
from perfmodel.errors import InputError
from perfmodel.fit.deltanet import fit_constants, fit_scan, predict, scan_rows
from perfmodel.imports.aiconfigurator import convert_gdn
from perfmodel.profile import DEFAULTS, Profile, _check_field

SCAN = {"fixed_s": 20e-6, "chunk_s": 2.5e-6, "token_s": 2e-9}


def _rows(scan: dict, sms: int, noise: float = 0.0, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for batch in (1, 2, 4, 16, 64):
        for tokens in (1, 64, 256, 1024, 4096, 16384):
            for heads in (4, 8, 16, 32, 64):
                t = float(scan_time(batch, batch * tokens, heads, 128, sms, scan, np)) * float(np.exp(rng.normal(0, noise)))
                rows.append({"kind": "deltanet", "time_s": t,
                             "params": {"phase": "prefill", "batch": batch, "tokens": tokens, "value_heads": heads,
                                        "key_heads": max(heads // 4, 1), "dk": 128, "dv": 128, "launch": "graph"}})
    return rows


def test_scan_grows_with_the_chunks_of_a_sequence_not_with_its_flops():
    one = [float(scan_time(1, t, 8, 128, 132, SCAN, np)) for t in (CHUNK, 2 * CHUNK, 128 * CHUNK)]
    assert one[0] < one[1] < one[2]
    # 8 heads of one sequence: 16 CTAs, one wave; per chunk the step's latency, plus the parallel work
    assert one[2] == pytest.approx(SCAN["fixed_s"] + 128 * SCAN["chunk_s"] + 128 * CHUNK * 8 * SCAN["token_s"])
    # the same tokens as 16 sequences of 8 chunks each: one wave still (256 CTAs: two), far fewer chunk steps
    split = float(scan_time(16, 128 * CHUNK, 8, 128, 132, SCAN, np))
    assert split < one[2]


def test_scan_never_falls_as_tokens_or_sequences_grow():
    tokens = np.arange(1, 20000, 37, dtype=float)
    t = scan_time(1, tokens, 16, 128, 132, SCAN, np)
    assert np.all(np.diff(t) >= 0)
    seqs = np.arange(1, 300, dtype=float)
    t = scan_time(seqs, seqs * 512, 16, 128, 132, SCAN, np)
    assert np.all(np.diff(t) >= 0)


def test_fit_recovers_the_constants_it_was_made_from():
    rows = _rows(SCAN, 132, noise=0.03)
    fitted = fit_constants(scan_rows(rows), 132)
    for k, v in SCAN.items():
        assert fitted[k] == pytest.approx(v, rel=0.15), k
    found = fit_scan(rows, type("HW", (), {"sm_count": 132})(), "synthetic")
    assert found["rows"] == len(rows) and found["median_abs_error"] < 0.05
    assert found["held_out_median_abs_error"] is not None and found["held_out_median_abs_error"] < 0.06


def test_fit_takes_only_graph_timed_prefill_calls():
    rows = _rows(SCAN, 132)[:20]
    eager = [{**r, "params": {**r["params"], "launch": "eager"}} for r in rows]
    eager += [{**r, "params": {k: v for k, v in r["params"].items() if k != "launch"}} for r in rows]  # the first run's
    decode = [{**r, "params": {**r["params"], "phase": "decode"}} for r in rows]
    broken = [{**rows[0], "time_s": None}, {**rows[1], "error": "boom"}, {"kind": "gemm", "time_s": 1.0}]
    assert scan_rows(rows + eager + decode + broken) == rows
    assert fit_constants(rows[:5], 132) is None  # too few calls to fit three constants


def test_imported_gdn_rows_map_phases_and_kernels_and_skip_the_convolution():
    cols = {"kernel_source": ["chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule_packed_decode",
                              "causal_conv1d_fn", "chunk_gated_delta_rule_flashinfer", "mystery"],
            "phase": ["context", "generation", "context", "context", "context"],
            "batch_size": [2, 64, 2, 1, 1], "seq_len": [1024, 1, 1024, 4096, 8], "num_k_heads": [4, 4, 4, 2, 2],
            "head_k_dim": [128] * 5, "num_v_heads": [16, 16, 16, 8, 8], "head_v_dim": [128] * 5,
            "latency": [0.06, 0.005, 0.004, 0.2, 0.02]}
    conv = convert_gdn(cols)
    assert conv.read == 5 and len(conv.rows) == 3
    chunk, step, flashinfer = conv.rows
    assert chunk["params"]["op"] == "chunk" and chunk["params"]["phase"] == "prefill"
    assert chunk["time_s"] == pytest.approx(60e-6) and chunk["params"]["tokens"] == 1024
    assert step["params"]["op"] == "recurrent" and step["params"]["phase"] == "decode"
    assert flashinfer["params"]["kernel"] == "chunk_gated_delta_rule_flashinfer"
    assert any("convolution" in why for why in conv.skipped) and any("mystery" in why for why in conv.skipped)
    assert len(scan_rows(conv.rows)) == 2


def test_profile_refuses_a_non_positive_scan_constant():
    _check_field("deltanet_scan", {"fixed_s": 1e-5, "chunk_s": 2e-6, "token_s": 1e-9}, DEFAULTS.deltanet_scan, "p.json")
    with pytest.raises(InputError, match="deltanet_scan"):
        _check_field("deltanet_scan", {"chunk_s": -1.0}, DEFAULTS.deltanet_scan, "p.json")
    assert set(Profile().deltanet_scan) == {"fixed_s", "chunk_s", "token_s"}


def test_a_deltanet_prefill_is_priced_as_a_scan_and_a_decode_as_streaming():
    from perfmodel.projection import project

    p = project("h200-sxm", "qwen3.5-397b-a17b", engine="sglang", tp=8, batch=1, isl=8192, osl=16,
                batching="static")
    core = {t.op.phase: t for t in p.prefill.times + p.decode.times if t.op.name == "linear.core"}
    assert core["prefill"].op.kind == "scan" and core["decode"].op.kind == "copy"
    scan = p.profile.deltanet_scan
    expect = float(scan_time(1, 8192, 8, 128, p.hardware.sm_count, scan, np))
    assert core["prefill"].time == pytest.approx(expect, rel=1e-9)
    # a sequence's 128 chunks walked in turn: far above the same FLOPs at the tensor cores' rate
    assert core["prefill"].time > 20 * core["prefill"].op.flops / p.hardware.tensor_flops["bf16"]


def test_engine_tables_that_timed_the_kernel_stand_for_it():
    from perfmodel.paths import calibration_dir
    from perfmodel.profile import load_profile
    from perfmodel.resolve import resolve_profile
    from perfmodel.spec import load_spec

    hw = load_spec("h200-sxm")
    for engine in ("sglang", "vllm", "trtllm"):
        prof = resolve_profile(None, hw, engine)
        fam = prof.provenance["families"]["deltanet"]
        assert fam.get("profile") == f"h200-sxm-{engine}", (engine, fam)
        own = load_profile(calibration_dir() / f"h200-sxm-{engine}" / "profile.json").deltanet_scan
        assert prof.deltanet_scan == own  # the folder's own fit, not the defaults
    assert load_profile(calibration_dir() / "h200-sxm-trtllm" / "profile.json").deltanet_scan != DEFAULTS.deltanet_scan
    # plain PyTorch runs flash-linear-attention's kernel: the table that timed it (SGLang's), not vLLM's FlashInfer port
    for engine in ("torch", "hf"):
        assert resolve_profile(None, hw, engine).provenance["families"]["deltanet"]["profile"] == "h200-sxm-sglang"


def test_a_folders_own_runs_on_its_part_fit_it_and_another_parts_do_not(tmp_path):
    import json

    from perfmodel.fit.deltanet import fit_deltanet
    from perfmodel.fit.directory import deltanet_sources
    from perfmodel.spec import load_spec

    h200 = load_spec("h200-sxm")
    for name, device, scan in (("deltanet-h200", "NVIDIA H200", SCAN),
                               ("deltanet-h100", "NVIDIA H100 80GB HBM3", {k: 3 * v for k, v in SCAN.items()})):
        (tmp_path / name).mkdir()
        rows = [{**r, "env": {"device_name": device}} for r in _rows(scan, 132)]
        (tmp_path / name / "measurements.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    sources = deltanet_sources(tmp_path, h200)
    assert [name for name, _ in sources] == ["deltanet-h200"]
    prof, found = fit_deltanet(Profile(), [], h200, sources)
    assert found["source"] == "deltanet-h200/"
    for k, v in SCAN.items():
        assert prof.deltanet_scan[k] == pytest.approx(v, rel=0.02), k
    assert fit_deltanet(Profile(), [], h200, [])[1] is None  # nothing measured: the profile as it was


def test_training_walks_the_chunks_twice_backward():
    from perfmodel.train import project_train

    p = project_train("h200-sxm", "qwen3-next-80b-a3b", gpus=8, tp=1, ep=8, global_batch=64, seq=4096)
    ops = {t.top.op.name: t for t in p.ops if t.top.op.name.startswith("linear.core")}
    fwd, bwd = ops["linear.core"], ops["linear.core.bwd"]
    assert fwd.top.op.kind == bwd.top.op.kind == "scan" and bwd.top.role == "scan_bwd"
    assert bwd.total == pytest.approx(2 * fwd.total, rel=1e-9)
