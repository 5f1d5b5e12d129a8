"""Tables as measured (perfmodel.cost.tables): interpolation, reach, anchoring, when a table applies, and the
held-out validation (perfmodel.fit.tables)."""
from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from perfmodel import project
from perfmodel.cost import table_ratio, time_op
from perfmodel.cost import tables as T
from perfmodel.fit.latency import load_cases, predict_cases
from perfmodel.ops import gemm
from perfmodel.paths import repo_root
from perfmodel.profile import load_profile
from perfmodel.resolve import resolve_hardware, resolve_profile
from perfmodel.spec import load_spec, spec_with

B200 = repo_root() / "calibration" / "b200-trtllm"


# --- the interpolant ------------------------------------------------------------------------------------------

def _grid(nx=5, ny=4):
    gx, gy = np.arange(nx, dtype=float), np.arange(ny, dtype=float) * 1.5
    x = np.array([(a, b) for a in gx for b in gy])
    return x


def test_interpolation_reproduces_grid_points_exactly():
    x = _grid()
    values = np.random.default_rng(0).normal(size=len(x))
    it = T.Interpolant(x, values)
    assert np.allclose(it.at(x), values, rtol=0, atol=1e-12)
    # scattered points (no full grid: the local plane) are reproduced exactly too
    xs = np.random.default_rng(1).uniform(0, 10, size=(30, 3))
    vs = np.random.default_rng(2).normal(size=30)
    assert np.allclose(T.Interpolant(xs, vs).at(xs), vs, rtol=0, atol=1e-12)


def test_log_linear_between_grid_points():
    """Multilinear in log2 of the dims: a bilinear function of the logs is reproduced everywhere inside."""
    x = _grid()
    f = lambda p: 0.3 + 0.2 * p[:, 0] - 0.1 * p[:, 1] + 0.05 * p[:, 0] * p[:, 1]  # noqa: E731
    it = T.Interpolant(x, f(x))
    q = np.random.default_rng(3).uniform(x.min(0), x.max(0), size=(50, 2))
    assert np.allclose(it.at(q), f(q), atol=1e-12)
    # halfway between two neighbouring grid points in one dim: the mean of their values
    mid = np.array([[0.5, 1.5]])
    assert it.at(mid)[0] == pytest.approx(0.5 * (f(np.array([[0.0, 1.5]])) + f(np.array([[1.0, 1.5]])))[0])


def test_a_cell_with_an_unmeasured_corner_falls_back_to_the_local_plane():
    x = _grid()
    f = lambda p: 0.1 * p[:, 0] + 0.2 * p[:, 1]  # noqa: E731  (a plane: the local plane's own form)
    keep = ~np.all(x == [2.0, 1.5], axis=1)
    it = T.Interpolant(x[keep], f(x[keep]))
    assert it.at(np.array([[2.0, 1.5]]))[0] == pytest.approx(f(np.array([[2.0, 1.5]]))[0], abs=1e-3)


def test_reach_limit():
    it = T.Interpolant(np.array([[0.0], [3.0]]), np.array([0.0, 1.0]))
    reach = math.log2(T.REACH)
    c, covered = it.clamp(np.array([[3.0 + 0.9 * reach], [3.0 + 1.1 * reach], [-0.9 * reach], [-1.1 * reach]]))
    assert covered.tolist() == [True, False, True, False]
    assert c[:, 0].tolist() == [3.0, 3.0, 0.0, 0.0]


# --- a small folder of measured GEMMs -------------------------------------------------------------------------

def _residual(m, n, k):
    """The fixture's measured / fitted, in log: smooth in log2 of the shape."""
    return 0.05 * np.log2(m) - 0.03 * np.log2(n) + 0.02 * np.log2(k) - 0.1


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """An imported-table folder on the B200: the shipped profile, and bf16 GEMM rows on a 5 x 4 x 3 grid whose
    times are the fit's times the known residual."""
    d = tmp_path_factory.mktemp("tables") / "b200-fixture"
    d.mkdir()
    shutil.copy(B200 / "profile.json", d / "profile.json")
    shutil.copy(B200 / "environment.json", d / "environment.json")
    prof = T.without_tables(load_profile(d))
    hw = load_spec("b200")
    rows = []
    for m in (16, 64, 256, 1024, 4096):
        for n in (1024, 2048, 4096, 8192):
            for k in (1024, 4096, 16384):
                rows.append({"id": f"instream|bf16|op=gemm|m={m}|n={n}|k={k}", "kind": "instream",
                             "params": {"op": "gemm", "m": m, "n": n, "k": k, "dtype": "bf16"},
                             "time_s": 1.0, "kernel": "torch_flow"})
    cases, *_ = load_cases(rows, 0.25, 0)
    fit = predict_cases(cases, hw, prof)
    for r, f in zip(rows, fit):
        p = r["params"]
        r["time_s"] = float(f * math.exp(_residual(p["m"], p["n"], p["k"])))
    (d / "measurements.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    T.clear_cache()
    return d


def _fixture_profile(folder):
    return load_profile(folder)


def test_load_profile_names_its_tables(folder):
    prof = _fixture_profile(folder)
    assert prof.gemm_table == str(folder.resolve()) and prof.attn_table == str(folder.resolve())
    assert T.without_tables(prof).gemm_table == ""


def test_anchored_price_is_the_measured_time_on_a_grid_point(folder):
    prof, hw = _fixture_profile(folder), load_spec("b200")
    rows = [json.loads(line) for line in (folder / "measurements.jsonl").read_text().splitlines()]
    r = rows[17]
    p = r["params"]
    op = gemm("x", p["m"], p["n"], p["k"], "bf16", phase="prefill")
    assert table_ratio(op, hw, prof) == pytest.approx(math.exp(_residual(p["m"], p["n"], p["k"])), rel=1e-9)
    assert float(time_op(op, hw, prof).time) == pytest.approx(r["time_s"], rel=1e-9)
    # between the measured m the table's time is log-linear in m (at the op's n and k)
    alone = lambda m: float(time_op(gemm("x", m, 3000, 2048, "bf16"), hw, prof).time)  # noqa: E731
    assert math.log(alone(128)) == pytest.approx(0.5 * (math.log(alone(64)) + math.log(alone(256))), rel=1e-9)


def test_the_tables_time_never_falls_as_the_batch_grows(folder):
    prof, hw = _fixture_profile(folder), load_spec("b200")
    ms = np.arange(16, 600, dtype=float)  # from the smallest measured m: below it the fit's own shape
    t = time_op(gemm("x", ms, 3000, 2048, "bf16"), hw, prof).time
    assert np.all(np.diff(t) >= 0)


def test_anchoring_is_continuous_at_the_grid_edge_and_ends_at_the_reach(folder):
    prof, hw = _fixture_profile(folder), load_spec("b200")
    ratio = lambda k: table_ratio(gemm("x", 1024, 2048, k, "bf16"), hw, prof)  # noqa: E731  (k: 1024 .. 16384)
    edge = ratio(16384)
    assert ratio(16384 * 1.0001) == pytest.approx(edge, rel=1e-4)  # continuous at the edge of the range
    assert ratio(16384 * math.sqrt(T.REACH)) == pytest.approx(edge ** 0.5, rel=1e-9)  # fading across the reach
    assert ratio(16384 * T.REACH * 0.9999) == pytest.approx(1.0, abs=1e-3)  # continuous at the reach
    assert ratio(16384 * T.REACH * 1.25) == 1.0  # beyond: the fitted model alone
    fit = T.without_tables(prof)
    op = gemm("x", 1024, 2048, 16384 * 1.5, "bf16")
    share = math.log2(1.5) / math.log2(T.REACH)
    assert float(time_op(op, hw, prof).time) == pytest.approx(float(time_op(op, hw, fit).time) * edge ** (1 - share))
    # below the smallest measured m (16): the smallest's anchor, however few the rows
    low = table_ratio(gemm("x", 16, 2048, 4096, "bf16"), hw, prof)
    assert table_ratio(gemm("x", 1, 2048, 4096, "bf16"), hw, prof) == pytest.approx(low, rel=1e-12)


def test_anchoring_keeps_the_in_step_clock_and_the_bound(folder):
    prof, hw = _fixture_profile(folder), load_spec("b200")
    fit = T.without_tables(prof)
    op = gemm("x", 4096, 8192, 16384, "bf16", phase="prefill")
    ratio = table_ratio(op, hw, prof)
    for sustained in (None, 1.0):
        a, b = time_op(op, hw, prof, sustained=sustained), time_op(op, hw, fit, sustained=sustained)
        assert float(a.time) == pytest.approx(float(b.time) * ratio)
        assert float(a.compute) == pytest.approx(float(b.compute) * ratio)
        assert a.bound == b.bound


def test_vectorised_shapes_price_like_scalars(folder):
    prof, hw = _fixture_profile(folder), load_spec("b200")
    ms = np.array([16.0, 100.0, 1024.0, 9000.0])
    arr = time_op(gemm("x", ms, 4096, 4096, "bf16"), hw, prof).time
    one = [float(time_op(gemm("x", float(m), 4096, 4096, "bf16"), hw, prof).time) for m in ms]
    assert np.allclose(arr, one, rtol=1e-12)


def test_held_out_validation_on_the_fixture(folder):
    from perfmodel.fit.tables import markdown, validate_folder

    result = validate_folder(folder)
    c = result["classes"]["gemm bf16"]
    rows = [json.loads(line) for line in (folder / "measurements.jsonl").read_text().splitlines()]
    (cls,) = T.classes_of(rows)
    held = cls.dims[cls.held_out(0.25, 0)]
    assert c["n"] == len(held) > 0 and c["covered"] == c["n"]
    # the fitted model misses each held-out row by its residual; the table (the residual is linear in the logs)
    # reproduces it
    fitted = np.array([abs(math.exp(-_residual(m, n, k)) - 1) for m, n, k in held])
    assert c["fitted"]["median_abs_error"] == pytest.approx(float(np.median(fitted)), rel=1e-6)
    assert c["interpolated"]["median_abs_error"] < 1e-3
    assert "| gemm bf16 |" in markdown(result)


# --- projections ----------------------------------------------------------------------------------------------

def test_a_projection_uses_the_table_on_its_own_part():
    hw = resolve_hardware("b200")
    prof = resolve_profile(None, hw)
    assert prof.gemm_table.endswith("b200-trtllm") and T.family_table(prof, "gemm", hw) is not None
    with_tables = project("b200", "llama70b")
    without = project("b200", "llama70b", profile=T.without_tables(prof))
    assert with_tables.ttft_s != pytest.approx(without.ttft_s, rel=1e-4)
    assert any("measured tables" in a for a in with_tables.assumptions)
    ratios = [table_ratio(t.op, hw, prof) for t in with_tables.decode.times if t.op.kind == "gemm"]
    assert all(r is not None for r in ratios) and any(abs(r - 1.0) > 1e-3 for r in ratios)


def test_no_table_on_another_part_nor_for_a_carried_profile():
    b200 = resolve_profile(None, resolve_hardware("b200"))
    h200 = resolve_hardware("h200-sxm")
    op = gemm("x", 1024, 8192, 8192, "bf16")
    assert table_ratio(op, h200, b200) is None  # the B200's table does not price an H200 shape
    carried = resolve_profile(str(B200), h200)  # the B200 profile carried to the H200
    assert carried.gemm_table == "" and table_ratio(op, h200, carried) is None


def test_a_what_if_spec_takes_the_ratio_form():
    hw = resolve_hardware("b200")
    prof = resolve_profile(None, hw)
    what_if = spec_with(hw, hbm_bandwidth=hw.hbm_bandwidth * 1.5)
    op = gemm("x", 8, 8192, 8192, "bf16", phase="decode")
    ratio = table_ratio(op, hw, prof)
    assert table_ratio(op, what_if, prof) == ratio
    fit = T.without_tables(prof)
    t = float(time_op(op, what_if, prof).time)
    assert t == pytest.approx(float(time_op(op, what_if, fit).time) * ratio)  # t_fit(hw') x t_table / t_fit(hw)
    assert t != pytest.approx(float(time_op(op, hw, prof).time), rel=1e-3)  # never the parent's table time
    renamed = spec_with(hw, key="b200-what-if")  # a renamed copy is the same part: its table, the same ratio
    assert table_ratio(op, renamed, prof) == ratio
    other = spec_with(hw, key="not-a-b200", generation="hopper")
    assert table_ratio(op, other, prof) is None  # another generation: another part


def test_moe_module_takes_one_ratio_and_the_engines_kernel():
    hw = resolve_hardware("b200")
    p = project("b200", "mixtral", tp=2, batch=8, dtype="fp8")  # b200-trtllm's fp8 MoE table beats its fit
    module = [t for t in p.decode.times if "moe_tokens" in t.op.params]
    assert {t.op.name for t in module} == {"moe.permute", "moe.gate_up", "moe.swiglu", "moe.down", "moe.unpermute"}
    ratios = {table_ratio(t.op, hw, p.profile) for t in module}
    assert len(ratios) == 1 and None not in ratios and ratios != {1.0}
    # TensorRT-LLM's NVFP4 MoE on Blackwell runs the min-latency kernel: the B300 table holds only CUTLASS rows
    b300 = resolve_hardware("b300")
    prof = resolve_profile(None, b300)
    op = [t.op for t in project("b300", "mixtral", tp=2, batch=8, dtype="fp4").decode.times
          if t.op.name == "moe.gate_up"][0]
    folder = T.family_table(prof, "moe", b300)
    key = T.op_class(op)[1]  # Mixtral's router skew (perfmodel.routing.default_routing)
    assert key == ("moe", "fp4", "power_law_1.2")
    assert folder is not None and folder.kernel_for("moe", key) is None
    # ... so it is carried: B300's CUTLASS table times the min-latency / CUTLASS ratio measured on the sibling part
    # that times both (of B200 and GB200, the nearer in fp4 rate over HBM bandwidth)
    sibling, wanted, have = T.kernel_sibling(folder, key)
    assert (wanted, have) == (T.MIN_LATENCY_MOE_KERNEL, "moe_torch_flow_cutlass")
    assert sibling.path.name in ("b200-trtllm", "gb200-trtllm")
    price = lambda op, h, p: time_op(op, h, p).time  # noqa: E731
    dims = T.op_class(op)[2]
    own = folder.table(key, have, price).ratio(dims)
    kernels = sibling.table(key, wanted, price).ratio(dims) / sibling.table(key, have, price).ratio(dims)
    assert table_ratio(op, b300, prof) == pytest.approx(float(own * kernels), rel=1e-12)
    assert float(kernels) < 0.7  # the min-latency kernel is the faster one at decode sizes
    p300 = project("b300", "mixtral", tp=2, batch=8, dtype="fp4")
    assert any(f"ratio on {sibling.path.name}" in a for a in p300.assumptions)


def test_predict_cases_is_the_fit_alone():
    """The fit and its validation price rows with the fitted model: a table never anchors its own rows."""
    hw = load_spec("b200")
    prof = load_profile(B200)
    assert prof.gemm_table
    rows = [{"id": "instream|bf16|op=gemm|m=64|n=4096|k=4096", "kind": "instream",
             "params": {"op": "gemm", "m": 64, "n": 4096, "k": 4096, "dtype": "bf16"}, "time_s": 1e-5}]
    cases, *_ = load_cases(rows, 0.25, 0)
    assert predict_cases(cases, hw, prof)[0] == predict_cases(cases, hw, T.without_tables(prof))[0]


def test_a_class_is_fitted_exactly_as_the_fit_prices_its_rows():
    """The residual's fitted times are perfmodel.fit.latency.predict_cases's, row for row (one class per family)."""
    from perfmodel.measure.store import read_rows

    prof = T.without_tables(load_profile(B200))
    hw = load_spec("b200")
    all_rows = read_rows(B200 / "measurements.jsonl.gz")
    for key in (("gemm", "fp8_block"), ("moe", "fp4", "balanced"),
                T.attention_key("trtllm", "bf16", "bf16", 128, 128, True, False, True)):
        rows = [r for r in all_rows if (T.row_class(r) or (None,))[0] == key][:40]
        (cls,) = T.classes_of(rows)
        fitted = T.fitted_times(cls, prof, hw, lambda op, h, p: time_op(op, h, p).time)
        cases, *_ = load_cases(rows, 0.25, 0)
        assert len(cases) == len(rows) == len(cls)
        assert np.allclose(fitted, predict_cases(cases, hw, prof), rtol=1e-12)


def test_docs_tables_table_is_regenerated(generated_block):
    doc, now = generated_block("tables.md", "tables-table", "tables_table.py", "tables")
    assert doc == now, "run python docs/tools/tables_table.py and paste it into docs/tables.md"


def test_docs_tables_effect_is_regenerated(generated_block):
    doc, now = generated_block("tables.md", "tables-effect", "tables_effect.py", "table")
    assert doc == now, "run python docs/tools/tables_effect.py and paste it into docs/tables.md"
