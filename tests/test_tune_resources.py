"""The resource model against what the compiler reported for the kernels timed on the H200: the register
formula is the least-squares fit it says it is, its spill prediction agrees with the compiler, the compiled
table is what the rows hold, and spills cost what the L1 left by shared memory can hold."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from perfmodel.profile import DEFAULTS
from perfmodel.spec import load_spec
from perfmodel.tune.compiled import TABLE, records_from_rows
from perfmodel.tune.constants import default_constants
from perfmodel.tune.machine import machine
from perfmodel.tune.resources import (REG_FIT, REG_FIT_UNALIGNED, SPILL_AT, VECTOR_BYTES, gemm_footprint, k_aligned,
                                      mma_family)
from perfmodel.tune.space import GemmConfig, parse_gemm_key

ROOT = Path(__file__).resolve().parent.parent
RUN2 = ROOT / "calibration/h200-tune/run2/tune_measurements.jsonl.gz"
HW = load_spec("h200")


@pytest.fixture(scope="module")
def compiled_variants():
    """(family, config, aligned, regs, spills) of every GEMM variant the second H200 run compiled."""
    if not RUN2.is_file():
        pytest.skip("the H200 tuning rows are not in this checkout")
    seen = {}
    for line in gzip.decompress(RUN2.read_bytes()).decode().splitlines():
        r = json.loads(line)
        if r["kind"] != "gemm" or not r.get("config") or "regs" not in r:
            continue
        c = parse_gemm_key(r["key"])
        key = (c.block_m, c.block_n, c.block_k, c.num_warps, c.num_stages, c.split_k, k_aligned(r["shape"]["k"]))
        regs, spills = seen.get(key, (0, 0))
        seen[key] = (max(regs, r["regs"]), max(spills, r["spills"]))
    out = []
    for (bm, bn, bk, w, s, sk, aligned), (regs, spills) in seen.items():
        out.append((mma_family(HW, bm, w), GemmConfig(bm, bn, bk, 8, w, s, sk), aligned, regs, spills))
    return out


def _features(cfg):
    threads = 32 * cfg.num_warps
    return (1.0, cfg.block_m * cfg.block_n / threads,
            (cfg.block_m + cfg.block_n) * cfg.block_k * 2 / VECTOR_BYTES / threads)


def test_register_formula_is_the_least_squares_fit(compiled_variants):
    for fam in ("wgmma", "mma.sync"):
        rows = [(_features(c), regs) for f, c, aligned, regs, spills in compiled_variants
                if f == fam and aligned and spills == 0 and regs < 240]
        x = np.array([r[0] for r in rows])
        y = np.array([r[1] for r in rows], dtype=float)
        coef = np.linalg.lstsq(x, y, rcond=None)[0]
        assert len(rows) > 100
        assert np.allclose(coef, REG_FIT[fam], atol=0.1), (fam, coef)


def test_unaligned_register_formula_is_the_least_squares_fit(compiled_variants):
    for fam in ("wgmma", "mma.sync"):
        rows = []
        for f, c, aligned, regs, spills in compiled_variants:
            if f != fam or aligned or spills or regs >= 255:
                continue
            threads = 32 * c.num_warps
            rows.append(((1.0, (c.block_m + c.block_n) * c.block_k / threads), regs - c.block_m * c.block_n / threads))
        coef = np.linalg.lstsq(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]), rcond=None)[0]
        assert np.allclose(coef, REG_FIT_UNALIGNED[fam], atol=0.1), (fam, coef)


def test_spill_prediction_agrees_with_the_compiler(compiled_variants):
    """The formula alone (no compiled table) predicts which aligned variants spill."""
    agree = total = 0
    for fam, c, aligned, regs, spills in compiled_variants:
        if not aligned:
            continue
        base, per_acc, per_vec = REG_FIT[fam]
        one, acc, vec = _features(c)
        demand = base + per_acc * acc + per_vec * vec
        agree += (demand > SPILL_AT[fam]) == (spills > 0)
        total += 1
    assert total > 350 and agree >= 0.95 * total


def test_compiled_table_is_regenerated_from_the_rows():
    if not RUN2.is_file():
        pytest.skip("the H200 tuning rows are not in this checkout")
    rows = []
    for f in sorted((ROOT / "calibration/h200-tune").glob("**/tune_measurements.jsonl.gz")):
        rows += [json.loads(x) for x in gzip.decompress(f.read_bytes()).decode().splitlines()]
    table = [json.loads(x) for x in TABLE.read_text().splitlines()]
    assert records_from_rows(rows) == table


def test_footprint_takes_the_compilers_figures():
    big = GemmConfig(256, 128, 64, 8, 8, 4, 1)  # the fastest large-prefill kernel: 38 spilled words
    f = gemm_footprint(HW, big, "bf16", True, True)
    assert f.source == "compiler" and f.spill_regs == 38 and f.regs == 255
    w4 = gemm_footprint(HW, GemmConfig(128, 128, 64, 8, 4, 3, 1), "bf16", True, True)
    assert w4.source == "compiler" and w4.spill_regs == 134
    # a variant never compiled (BLOCK_K 32 is outside the reduced grid): the formula
    assert gemm_footprint(HW, GemmConfig(128, 128, 32, 8, 8, 3, 1), "bf16").source == "formula"
    # another part: never the H200's table
    assert gemm_footprint(load_spec("a100-sxm-80gb"), big, "bf16").source == "formula"


def test_unaligned_k_has_no_pipeline():
    cfg = GemmConfig(128, 128, 64, 8, 8, 4, 1)
    assert gemm_footprint(HW, cfg, "bf16", True).smem_bytes == 4 * 256 * 64 * 2
    assert gemm_footprint(HW, cfg, "bf16", False).smem_bytes == 256 * 64 * 2  # one buffer whatever num_stages


def test_split_k_epilogue_needs_shared_memory():
    f = gemm_footprint(HW, GemmConfig(256, 256, 64, 8, 8, 3, 2), "bf16")
    assert f.invalid and "shared memory" in f.invalid  # 256 x 256 fp32 partials: 256 KiB


def test_spills_cost_little_in_l1_and_much_beyond():
    mach = machine(HW, DEFAULTS, "bf16", default_constants(DEFAULTS))
    fits = mach.spill_time(np.array([38.0]), 256, 1, 147456)  # 39 KB of spills, 109 KB of L1 left
    over = mach.spill_time(np.array([400.0]), 256, 1, 147456)  # 410 KB of spills
    assert over[0] / fits[0] > 400 / 38 * 1.5
