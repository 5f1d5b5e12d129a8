"""The tuning model responds to the right things; CLI fields; bad input; the compile table agrees."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfmodel.profile import DEFAULTS
from perfmodel.spec import load_spec
from perfmodel.tune.gemm_model import predict_gemm
from perfmodel.tune.machine import machine
from perfmodel.tune.rank import proposals, rank_attention, rank_gemm
from perfmodel.tune.resources import attention_footprint, gemm_footprint
from perfmodel.tune.space import GemmConfig, gemm_space, parse_attention_key, parse_gemm_key

ROOT = Path(__file__).resolve().parent.parent
HW = load_spec("h200")
A100 = load_spec("a100-sxm-80gb")


def _t(m, n, k, cfg, hw=HW):
    return predict_gemm(m, n, k, cfg, machine(hw, DEFAULTS, "bf16"), hw, DEFAULTS)


def test_smem_over_the_sm_limit_is_invalid():
    big = GemmConfig(256, 256, 128, 8, 8, 4, 1)  # 4 x (256+256) x 128 x 2 B = 512 KiB
    p = _t(4096, 4096, 4096, big)
    assert not p.valid and "shared memory" in p.reasons[0]
    # 4 buffers of 48 KiB = 192 KiB: fits an H200 SM (228 KiB), not an A100's (164 KiB). On the A100 the
    # mma.sync pipeline keeps num_stages - 1 buffers, so it takes num_stages 5 to ask for four.
    assert _t(4096, 4096, 4096, GemmConfig(128, 256, 64, 8, 8, 4, 1)).valid
    assert not _t(4096, 4096, 4096, GemmConfig(128, 256, 64, 8, 8, 5, 1), A100).valid
    assert _t(4096, 4096, 4096, GemmConfig(128, 256, 64, 8, 8, 4, 1), A100).valid


def test_wave_quantization_makes_m_just_over_a_wave_slower_per_flop():
    cfg = GemmConfig(128, 256, 64, 8, 8, 3, 1)
    # 4096/256 = 16 tile columns; 132 SMs: 8 rows of 128 = 128 tiles (<1 wave), 9 rows = 144 tiles (2 waves)
    fits = _t(8 * 128, 4096, 4096, cfg).time_s
    over = _t(9 * 128, 4096, 4096, cfg).time_s
    assert over / fits > 1.5  # 12.5% more work, nearly twice the time
    assert _t(9 * 128, 4096, 4096, cfg).parts["busiest_sm_ctas"] == 2


def test_split_k_wins_for_small_mn_large_k():
    r = rank_gemm(HW, DEFAULTS, 16, 1024, 28672)
    best_split = min(p.time_s for p in r.ranked if p.config.split_k > 1)
    best_plain = min(p.time_s for p in r.ranked if p.config.split_k == 1)
    assert best_split < best_plain
    r = rank_gemm(HW, DEFAULTS, 4096, 4096, 4096)  # plenty of tiles: splitting K only adds the reduction
    assert r.ranked[0].config.split_k == 1
    assert all(p.config.split_k <= 2 for p in r.ranked)  # more would be over four CTAs an SM: pruned


def test_more_stages_hide_latency_until_smem_runs_out():
    t = [_t(1, 8192, 8192, GemmConfig(16, 64, 128, 1, 4, s, 1)).time_s for s in (2, 3, 4)]
    assert t[0] > t[1] >= t[2]


def test_group_m_cuts_hbm_traffic_of_a_large_product():
    a = _t(16384, 16384, 8192, GemmConfig(128, 128, 64, 1, 8, 3, 1)).parts["hbm_bytes"]
    b = _t(16384, 16384, 8192, GemmConfig(128, 128, 64, 8, 8, 3, 1)).parts["hbm_bytes"]
    assert b < 0.6 * a


def test_space_pruning():
    space = gemm_space(1, 4096, 4096, 132)
    assert all(c.block_m in (16, 64) for c in space)  # taller tiles are padding (64 kept for wgmma)
    assert all(c.group_m == 1 for c in space)  # one row of tiles: GROUP_M changes nothing
    assert parse_gemm_key(space[0].key) == space[0]


def test_proposals_in_predicted_order_or_by_family():
    r = rank_gemm(HW, DEFAULTS, 2048, 6144, 4096)
    props = proposals(r, 8)  # PROPOSAL_BAND 0: plain predicted order
    assert [p.config for p in props] == [p.config for p in r.ranked[:8]]
    spread = proposals(r, 8, band=1.0)  # one of each tile/warps/split family first
    assert len(spread) == 8 and spread[0] is r.ranked[0]
    fams = {(p.config.block_m, p.config.block_n, p.config.block_k, p.config.num_warps) for p in spread}
    assert len(fams) == 8


def test_attention_ranking_and_limits():
    r = rank_attention(HW, DEFAULTS, 1, 32, 8, 2048, 2048, 128, True)
    assert r.ranked and r.invalid  # some K/V pipelines do not fit
    causal = r.ranked[0].time_s
    full = rank_attention(HW, DEFAULTS, 1, 32, 8, 2048, 2048, 128, False).ranked[0].time_s
    assert 0.4 < causal / full < 0.75  # about half the blocks


def test_resource_model_against_the_compiler_table():
    """Shared memory and the MMA family of every probe row (registers: tests/test_tune_resources.py, against
    the kernel as the device compiled it)."""
    rows = [json.loads(x) for x in (ROOT / "perfmodel/tune/data/compile_sm90.jsonl").read_text().splitlines()]
    assert len(rows) >= 500
    agree = 0
    for r in rows:
        if r["kind"] == "gemm":
            f = gemm_footprint(HW, parse_gemm_key(r["config"]), "bf16")
        else:
            f = attention_footprint(HW, parse_attention_key(r["config"]), 128, "bf16")
        agree += f.smem_bytes == r["smem_bytes"] and f.mma == r["mma"]
    assert agree == len(rows)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "perfmodel", *args], capture_output=True, text=True, cwd=ROOT)


def test_cli_json_fields(capsys):
    from perfmodel.cli import main

    r = _cli("tune", "gemm", "--arch", "h200", "--m", "16", "--n", "4096", "--k", "4096", "--top", "3",
             "--format", "json", "--calibration", "none")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["kernel"] == "gemm" and d["valid"] > 0 and len(d["top"]) == 3
    row = d["top"][0]
    assert {"rank", "config", "key", "time_s", "tflops", "bound", "parts", "reasons"} <= set(row)
    assert {"block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages", "split_k"} == set(row["config"])
    # the attention ranking in this process (the entry point is the one run above)
    assert main(["tune", "attention", "--heads", "32", "--kv-heads", "8", "--seq-q", "1024",
                 "--calibration", "none"]) == 0
    assert "BM" in capsys.readouterr().out


@pytest.mark.parametrize("args,field", [
    (("tune", "gemm", "--m", "0", "--n", "8", "--k", "8"), "--m"),
    (("tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--dtype", "int4"), "--dtype"),
    (("tune", "gemm", "--arch", "mi300x", "--m", "8", "--n", "8", "--k", "8"), "--arch"),
    (("tune", "attention", "--heads", "32", "--kv-heads", "5", "--seq-q", "64"), "--kv-heads"),
    (("tune", "evaluate", "/nonexistent-folder"), "nonexistent"),
])
def test_bad_input_one_line_exit_2(cli, args, field):
    r = cli([*args, "--calibration", "none"], ROOT)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and field in r.stderr and "Traceback" not in r.stderr


def test_evaluate_on_synthetic_rows(tmp_path):
    """Rows built here (not measurements): the exhaustive best is put inside or outside the proposals."""
    from perfmodel.tune.evaluate import evaluate

    r = rank_gemm(HW, DEFAULTS, 64, 2560, 8192)
    props = [p.config.key for p in proposals(r, 8)]
    rows = []
    for i, p in enumerate(r.ranked):
        t = 1e-5 * (1.0 + 0.01 * i)
        rows.append({"kind": "gemm", "shape_name": "s", "shape": {"m": 64, "n": 2560, "k": 8192, "dtype": "bf16"},
                     "key": p.config.key, "time_s": t, "compile_s": 1.0, "bench_s": 0.01, "grid": "full"})
    res = evaluate(rows, HW, DEFAULTS)
    s = res["shapes"][0]
    assert s["complete"] and s["hit"] and s["top1_slowdown"] == 0.0
    assert res["summary"]["hit_rate"] == 1.0 and s["tuning_time_saved"] > 0.9
    # make a configuration outside the proposals 10% faster than everything: a miss
    outside = next(x for x in rows if x["key"] not in props)
    outside["time_s"] = 0.5e-5
    s = evaluate(rows, HW, DEFAULTS)["shapes"][0]
    assert not s["hit"] and s["top_k_gap"] > 0.9
    rows.pop()  # one valid configuration unmeasured: the shape is incomplete and not counted
    assert evaluate(rows, HW, DEFAULTS)["summary"]["complete_shapes"] == 0


def test_measure_runs_on_cpu(tmp_path):
    """The device script's CPU path: torch reference rows (Triton configs too when Triton is installed);
    resumable: a second run measures nothing new."""
    pytest.importorskip("torch")
    from perfmodel.tune.measure import ROWS, run

    n = run(tmp_path, 60, top=1, shapes="tiny", calibration="none", log=lambda s: None)
    assert n >= 3
    rows = [json.loads(x) for x in (tmp_path / ROWS).read_text().splitlines()]
    assert all(r["time_s"] > 0 for r in rows if r["key"] == "torch")
    assert (tmp_path / "environment.json").is_file()
    assert run(tmp_path, 60, top=1, shapes="tiny", calibration="none", log=lambda s: None) == 0
