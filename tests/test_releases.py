"""An engine release's own MoE and all-reduce tables (perfmodel.releases): which release stands for the one a
projection names."""
from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.errors import InputError
from perfmodel.releases import nearest, own_release, release_folders, release_key, release_table
from perfmodel.scenario import Scenario

ROOT = Path(__file__).resolve().parents[1]
B200_VLLM = ROOT / "calibration" / "b200-vllm"


@pytest.mark.parametrize("older, newer", [
    ("0.19.0", "0.22.0"), ("0.9.0", "0.19.0"), ("1.3.0rc10", "1.3.0rc20"), ("1.3.0rc23", "1.3.0"),
    ("1.2.0rc6", "1.2.0rc6.post3"), ("0.5.6", "0.5.6.post2"), ("0.5.6.post2", "0.5.9"), ("0.5.1-rc0.pre3", "0.5.1"),
    ("v0.12", "0.12.1"),
])
def test_release_order(older, newer):
    assert release_key(older) < release_key(newer)


@pytest.mark.parametrize("text", ["nightly-dev", "nightly-5b8c30d62b754b57", "", None, "latest"])
def test_names_that_are_no_release(text):
    assert release_key(text) is None
    assert nearest(text, ["0.19.0", "0.24.0"]) is None


def test_nearest_is_the_newest_not_newer_else_the_oldest():
    measured = ["0.24.0", "0.19.0", "0.22.0"]
    assert nearest("0.17.0", measured) == "0.19.0"  # older than every table: the oldest
    assert nearest("0.19.0", measured) == "0.19.0"
    assert nearest("0.21.3", measured) == "0.19.0"
    assert nearest("0.23.1", measured) == "0.22.0"
    assert nearest("0.30.0", measured) == "0.24.0"
    assert nearest("1.2.0rc6.post3", ["1.3.0rc10", "1.3.0rc20"]) == "1.3.0rc10"


def test_shipped_engine_folder_lists_its_other_releases():
    assert own_release(B200_VLLM) == "0.24.0"
    found = release_folders(B200_VLLM)
    assert {"0.19.0", "0.22.0"} <= set(found)
    for version, (path, families) in found.items():
        assert path.parent.name == "releases" and "moe" in families, version
    assert release_table(B200_VLLM, "moe", "0.17.0")[0] == "0.19.0"
    assert release_table(B200_VLLM, "moe", "0.24.0") is None  # the folder's own
    assert release_table(B200_VLLM, "moe", "nightly-dev") is None
    assert release_table(B200_VLLM, "gemm", "0.19.0") is None  # 0.19.0's GEMM tables were not imported


def test_a_projection_naming_a_release_prices_moe_with_its_tables():
    """MiniMax-M2.5 (block-fp8 experts) under vLLM on the B200: 0.19.0 ran them through its Triton fused_moe,
    slower at decode batches than 0.24.0's FlashInfer TensorRT-LLM kernel (aiconfigurator-core's tables of both)."""
    from perfmodel import project

    kw = dict(engine="vllm", dtype="fp8", tp=2, batch=64, isl=1024, osl=1024)
    new = project("b200", "MiniMaxAI/MiniMax-M2.5", **kw)
    old = project("b200", "MiniMaxAI/MiniMax-M2.5", engine_release="0.19.0", **kw)
    same = project("b200", "MiniMaxAI/MiniMax-M2.5", engine_release="0.24.0", **kw)
    assert old.decode.time_s > 1.05 * new.decode.time_s
    # the folder's own release prices as the folder does; naming it also runs its asynchronous scheduling
    assert same.decode.time_s == project("b200", "MiniMaxAI/MiniMax-M2.5", async_scheduling=True, **kw).decode.time_s
    prov = old.profile.provenance["release_tables"]
    assert prov["asked"] == "0.19.0" and prov["moe"].startswith("0.19.0 (b200-vllm/releases/0.19.0)")
    assert "release_tables" not in new.profile.provenance


def test_release_name_is_checked():
    with pytest.raises(InputError, match="--engine-release"):
        Scenario(engine_release="x" * 65).validated()
    for bad in ("0.19\n", "nan", "-1", "inf", "nightly-dev", ""):
        with pytest.raises(InputError, match="--engine-release"):
            Scenario(engine_release=bad).validated()
    assert Scenario(engine_release="1.3.0rc10").validated().engine_release == "1.3.0rc10"


def test_cli_engine_release(capsys):
    from perfmodel.cli import main

    args = ["project", "--arch", "b200", "--model", "MiniMaxAI/MiniMax-M2.5", "--engine", "vllm", "--dtype", "fp8",
            "--tp", "2", "--batch", "64", "--format", "json"]
    assert main(args + ["--engine-release", "0.19.0"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    text = json.dumps(doc)
    assert ('"release_tables": {"asked": "0.19.0", "moe": "0.19.0 (b200-vllm/releases/0.19.0)", '
            '"comm": "0.19.0 (b200-vllm/releases/0.19.0)"}') in text
    assert ("engine release 0.19.0: moe tables of 0.19.0 (b200-vllm/releases/0.19.0); comm tables of 0.19.0 "
            "(b200-vllm/releases/0.19.0)") in text
    assert main(args + ["--engine-release", "bad\tname"]) == 2
    assert "--engine-release" in capsys.readouterr().err


def test_cli_takes_a_dated_nightly_as_the_release_built_before_it(capsys):
    """``--engine-release nightly-dev-...-20260317-...`` under SGLang prices as 0.5.9 does (as perfmodel validate
    reads such a row); a nightly dated before every release read, or of an engine without dates, is refused."""
    from perfmodel.cli import main

    args = ["project", "--arch", "b200", "--model", "glm-5", "--engine", "sglang", "--dtype", "fp8", "--tp", "8",
            "--batch", "4", "--format", "json"]
    assert main(args + ["--engine-release", "nightly-dev-cu13-20260317-1eea7448"]) == 0
    nightly = capsys.readouterr().out
    assert main(args + ["--engine-release", "0.5.9"]) == 0
    assert capsys.readouterr().out == nightly
    assert main(args + ["--engine-release", "nightly-dev-cu13-20200317-1eea7448"]) == 2
    assert "2026-01-23 or later" in capsys.readouterr().err
    vllm = ["project", "--arch", "b200", "--model", "llama-3.1-8b", "--engine", "vllm", "--batch", "4"]
    assert main(vllm + ["--engine-release", "nightly-dev-20260317-x"]) == 2


def test_a_release_keeps_the_engine_folders_tables_for_what_it_did_not_time():
    """TensorRT-LLM 1.3.0rc23's MoE table on the B200 times one format (fp8 activations on fp4 weights): naming that
    release changes nothing for Qwen3-235B's block-fp8 experts, whose table and fitted values stay rc20's."""
    from perfmodel import project

    assert {"moe"} == set(release_folders(ROOT / "calibration" / "b200-trtllm")["1.3.0rc23"][1])
    kw = dict(engine="trtllm", dtype="fp8", tp=4, batch=32, isl=1024, osl=512)
    own = project("b200", "Qwen/Qwen3-235B-A22B-FP8", **kw)
    named = project("b200", "Qwen/Qwen3-235B-A22B-FP8", engine_release="1.3.0rc23", **kw)
    assert named.profile.provenance["release_tables"]["moe"].startswith("1.3.0rc23")
    assert named.decode.time_s == pytest.approx(own.decode.time_s, rel=1e-9)
    assert named.prefill.time_s == pytest.approx(own.prefill.time_s, rel=1e-9)


def test_same_kernels_of_the_shipped_release_tables():
    """SGLang 0.5.10's and TensorRT-LLM 1.3.0rc10's Hopper MoE tables time the kernels their engine folders' own
    tables time; vLLM 0.19's B200 table times Triton's fused_moe where 0.24's times FlashInfer's kernels."""
    from perfmodel.releases import same_kernels

    cal = ROOT / "calibration"
    assert same_kernels(cal / "h200-sxm-sglang", cal / "h200-sxm-sglang" / "releases" / "0.5.10")
    assert same_kernels(cal / "h100-sxm-trtllm", cal / "h100-sxm-trtllm" / "releases" / "1.3.0rc10")
    assert not same_kernels(B200_VLLM, B200_VLLM / "releases" / "0.19.0")


def test_validate_uses_a_rows_release_where_its_tables_time_the_same_kernels():
    from perfmodel.validate import run_validation

    table = ROOT / "workloads" / "validation" / "aiconfigurator_silicon.csv"

    def three(where):
        return [run_validation(table, where=where, limit=1, release_tables=flag)[0]["predicted"]
                for flag in (None, False, True)]

    # MiniMax-M2.5 under vLLM 0.17 on the B200: 0.19.0's MoE table times another kernel; only asked for does it
    # price the MoE layers (its all-reduce, the same kernel within 1% of 0.24.0's, prices the collectives)
    plain, off, every = three("model=MiniMaxAI/MiniMax-M2.5,hardware=b200,engine_version=0.17.0,metric=tpot")
    assert plain == pytest.approx(off, rel=0.01) and every > 1.02 * plain  # 0.19.0's Triton kernel for 0.17.0
    # Qwen3-235B under SGLang 0.5.6.post2 on the H200: 0.5.10's table, the same Triton kernel, prices it by default
    plain, off, every = three("model=Qwen/Qwen3-235B-A22B-FP8,hardware=h200-sxm,engine=sglang,metric=tpot")
    assert plain == every and plain > 1.05 * off
    # Qwen3.5 under SGLang 0.5.9 on 8 B200s: 0.5.9's all-reduce, the same kernel, slower than 0.5.14's
    plain, off, every = three("model=Qwen/Qwen3.5-397B-A17B,hardware=b200,engine_version=0.5.9,tp=8,metric=tpot")
    assert plain == every and plain > 1.03 * off


def test_a_releases_all_reduce_prices_the_collectives():
    """aiconfigurator-core times each engine's own all-reduce per release: SGLang's custom all-reduce got faster
    from 0.5.10 to 0.5.14 (on 8 B200s, 256 KiB: 25.6 us in 0.5.9, 8.5 us in 0.5.14). A release folder of that table
    alone prices the comm family (its rows anchor the collectives, perfmodel.cost.comm_tables), checked kernel by
    kernel like the MoE tables: vLLM 0.19's all-reduce is 0.24's kernel where its MoE kernel is not."""
    from perfmodel import project
    from perfmodel.releases import kernel_matched_families, same_kernels
    from perfmodel.resolve import setup

    cal = ROOT / "calibration"
    b200 = cal / "b200-sglang"
    assert release_folders(b200)["0.5.9"][1] == {"comm"}
    assert release_table(b200, "comm", "0.5.6")[0] == "0.5.9"  # older than every table: the oldest
    assert release_table(b200, "comm", "0.5.14") is None
    assert same_kernels(b200, b200 / "releases" / "0.5.9")
    assert not same_kernels(b200, cal / "b200-trtllm" / "releases" / "1.3.0rc10", "comm")  # TensorRT-LLM's kernel
    assert same_kernels(B200_VLLM, B200_VLLM / "releases" / "0.19.0", "comm")
    assert not same_kernels(B200_VLLM, B200_VLLM / "releases" / "0.19.0", "moe")
    assert kernel_matched_families(setup("b200", engine="vllm").profile, "0.17.0") == {"comm"}
    assert kernel_matched_families(setup("b200", engine="sglang").profile, "0.5.9") == {"comm"}
    # a release names one engine's build: SGLang on the GB200 takes its collectives from TensorRT-LLM's folder (no
    # SGLang table of the part), and none of TensorRT-LLM's releases stands for SGLang 0.5.9
    assert kernel_matched_families(setup("gb200", engine="sglang").profile, "0.5.9") == frozenset()
    assert "release_tables" not in setup("gb200", engine="sglang", release="0.5.9").profile.provenance
    assert setup("gb200", engine="trtllm", release="1.3.0rc10").profile.provenance["release_tables"]["comm"]

    kw = dict(engine="sglang", dtype="fp8", tp=8, batch=32, isl=1024, osl=1024)
    new = project("b200", "qwen3.5-397b-a17b", **kw)
    old = project("b200", "qwen3.5-397b-a17b", engine_release="0.5.9", **kw)

    assert old.decode.by_kind()["all_reduce"] > 2.5 * new.decode.by_kind()["all_reduce"]  # 0.5.14: one-shot
    for kind in ("gemm", "attention", "moe_permute"):  # no other table of 0.5.9: the folder's own
        assert old.decode.by_kind()[kind] == pytest.approx(new.decode.by_kind()[kind], rel=1e-9), kind
    assert old.profile.provenance["release_tables"] == {"asked": "0.5.9", "comm": "0.5.9 (b200-sglang/releases/0.5.9)"}
    # DeepSeek-V3's TP all-reduces run fused with the norm after them (SGLang's FlashInfer fusion): no release's
    # custom all-reduce times that kernel, and the engine folder's table keeps standing in for it
    kw = dict(engine="sglang", dtype="fp8", tp=8, batch=32, isl=1024, osl=1024)
    fused = [project("b200", "deepseek-v3", **kw), project("b200", "deepseek-v3", engine_release="0.5.9", **kw)]
    assert fused[1].decode.by_kind()["all_reduce"] == pytest.approx(fused[0].decode.by_kind()["all_reduce"], rel=1e-9)
    assert "release_tables" not in fused[1].profile.provenance


def test_a_named_release_runs_its_own_defaults_where_read():
    """``--engine-release`` also takes the defaults its source was read for (perfmodel.engines.release_defaults):
    vLLM 0.12 schedules synchronously, runs the shared experts on a second stream in small steps and computes its
    DeepGEMM layout's padded blocks; 0.24 schedules asynchronously and runs no such layout; a flag the user gives
    wins."""
    from perfmodel.engines import release_defaults
    from perfmodel.resolve import resolve_hardware, resolve_model

    assert release_defaults("vllm", "0.12.0") == {"async_scheduling": False, "shared_stream": "small",
                                                  "moe_padding": "computed"}
    assert release_defaults("vllm", "0.24.0") == {"async_scheduling": True, "shared_stream": "small",
                                                  "moe_padding": "none", "api_servers": 1}
    assert release_defaults("sglang", "0.5.9") == {} and release_defaults("vllm", None) == {}
    hw, model = resolve_hardware("h200-sxm"), resolve_model("qwen3-235b-a22b-fp8")

    def resolved(**kw):
        return Scenario(engine="vllm", dtype="fp8", tp=2, **kw).validated().for_hardware(hw, model)

    assert resolved(engine_release="0.12.0").moe_padding == "computed"
    assert resolved(engine_release="0.12.0", moe_padding="none").moe_padding == "none"
    assert resolved().moe_padding == "none" and resolved().async_scheduling is False
    # a validation row's release: its defaults without its tables
    assert resolved(defaults_release="0.12.0").moe_padding == "computed"
    assert resolved(defaults_release="0.24.0").async_scheduling is True
    assert resolved(engine_release="0.24.0").async_scheduling is True


def test_engines_doc_states_the_rc10_ep_gap():
    """docs/engines.md's figures for TensorRT-LLM 1.3.0rc10's block-fp8 MoE table against rc20's on the H200, as the
    tables give them: DeepSeek-V3's module at EP 8 and at EP 1, the ratio by token count."""
    import numpy as np

    from perfmodel.cost.table_store import FILE, decode_lazily

    def ratios(ep: int, width: int) -> dict:  # rc10 over rc20 by tokens: the expert width a rank holds
        out = []
        for folder in (ROOT / "calibration" / "h200-sxm-trtllm" / "releases" / "1.3.0rc10",
                       ROOT / "calibration" / "h200-sxm-trtllm"):
            c = decode_lazily(folder / FILE)[0][("moe", "fp8_block", "power_law_1.01")]["moe_torch_flow_cutlass"]
            m = (c.dims[:, 1] == 7168) & (c.dims[:, 2] == width) & (c.dims[:, 3] == 256 // ep) & (c.dims[:, 5] == ep)
            out.append(dict(zip(c.dims[m, 0].astype(int).tolist(), c.times[m].tolist())))
        return {t: out[0][t] / v for t, v in out[1].items() if t in out[0]}

    r8, r1 = ratios(8, 2048), ratios(1, 256)  # EP 8: whole experts; EP 1: each split over 8 ranks
    assert len(r8) > 20 and len(r1) > 20
    small = [r for t, r in r8.items() if t <= 16]
    large = [abs(r - 1) for t, r in r8.items() if t >= 64]
    doc = " ".join((ROOT / "docs" / "engines.md").read_text().split())
    assert f"{min(small):.1f}-{max(small):.1f}x rc20's at 1 to 16 tokens" in doc
    assert f"within {np.ceil(100 * max(large)):.0f}% of it from 64" in doc
    assert f"EP 1 within {np.ceil(100 * max(abs(r - 1) for r in r1.values())):.0f}% at every count" in doc


def test_engines_doc_states_the_all_reduce_by_release():
    """docs/engines.md, "The all-reduce by release": the ratios it quotes, from the release folders' rows."""
    import numpy as np

    from perfmodel.cost.comm_tables import ENGINE_SERIES, points

    def at(folder: Path, nbytes: int) -> float:
        return float(np.exp(np.interp(np.log(nbytes), *points(str(folder))[(ENGINE_SERIES, 8)])))

    cal = ROOT / "calibration"
    text = " ".join((ROOT / "docs" / "engines.md").read_text(encoding="utf-8").split())
    sglang = [at(cal / "b200-sglang" / "releases" / "0.5.9", b) / at(cal / "b200-sglang", b)
              for b in (32 * 2**10, 256 * 2**10, 2 * 2**20)]
    assert [round(r, 1) for r in sglang] == [1.5, 3.0, 1.5]
    assert "on 8 B200s 1.5x at 32 KiB, a decode step of 4 sequences, 3x at 256 KiB" in text and "1.5x at 2 MiB" in text
    vllm = cal / "h200-sxm-vllm" / "releases"
    assert round(at(vllm / "0.14.0", 256 * 2**10) / at(vllm / "0.18.0", 256 * 2**10), 1) == 1.9
    assert "1.9x slower at 256 KiB than 0.18's" in text
    trt = [cal / p for p in ("b200-trtllm", "b200-trtllm/releases/1.2.0rc5", "b200-trtllm/releases/1.3.0rc10",
                             "h200-sxm-trtllm", "h200-sxm-trtllm/releases/1.2.0rc5",
                             "h200-sxm-trtllm/releases/1.3.0rc10")]
    for b in (32 * 2**10, 256 * 2**10, 2 * 2**20):
        for part in (trt[:3], trt[3:]):
            times = [at(f, b) for f in part]
            assert max(times) / min(times) < 1.25, (b, times)
    assert "1.2.0rc5-rc20, within 25% of each other" in text


def test_a_dated_nightly_stands_for_the_release_built_before_it():
    """A nightly build of a date runs the code of that date: the newest release built on or before it stands for it
    (SGLang's releases dated by their PyPI wheels: 0.5.9 on 2026-02-23, 0.5.10 on 2026-04-05)."""
    from perfmodel.engines import nightly_release
    from perfmodel.validate import release_settings, row_release

    assert nightly_release("sglang", "nightly-dev-cu13-20260317-1eea7448") == "0.5.9"
    assert nightly_release("sglang", "nightly-dev-cu13-20260405-x") == "0.5.10"  # built the day 0.5.10 was
    assert nightly_release("sglang", "nightly-dev-20260216-d3bae71e") == "0.5.8"
    assert nightly_release("sglang", "nightly-dev-20250101-x") is None  # before every release read
    for text in ("nightly-dev", "0.5.9", "", None, "nightly-dev-2026031-x"):
        assert nightly_release("sglang", text) is None, text
    assert nightly_release("vllm", "nightly-dev-20260317-x") is None  # vLLM's dates not read
    row = {"engine": "sglang", "engine_version": "nightly-dev-cu13-20260401-b6fe0cca"}
    assert row_release(row) == "0.5.9" and row_release(row, wanted=False) is None
    assert release_settings(row, "sglang") == {"defaults_release": "0.5.9"}
    assert row_release({"engine": "sglang", "engine_version": "nightly-dev"}) is None
    from perfmodel.engines import RELEASE_DATES

    dates = RELEASE_DATES["sglang"]
    for doc in ("engines.md", "validation-silicon.md"):  # the dates the docs quote are the table's
        text = " ".join((ROOT / "docs" / doc).read_text(encoding="utf-8").split())
        assert f"0.5.9 on {dates['0.5.9']}, 0.5.10 on {dates['0.5.10']}" in text, doc
