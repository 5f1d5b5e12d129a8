"""The training expert-product measurement (perfmodel.measure.grouped_gemm) and its check against the model."""
from __future__ import annotations

import json

from perfmodel.measure.grouped_gemm import MAX_BYTES, PASSES, grouped_cases



def test_cases_are_whole_passes_within_the_memory_cap():
    cases = grouped_cases()
    assert len({c.id for c in cases}) == len(cases) > 0
    for i in range(0, len(cases), len(PASSES)):  # each shape's three passes together, forward first
        assert [c.params["pass"] for c in cases[i:i + len(PASSES)]] == list(PASSES)
    for c in cases:
        p = c.params
        m = p["experts"] * p["rows"]
        assert 2 * (m * p["k"] + m * p["n"] + p["experts"] * p["k"] * p["n"]) <= MAX_BYTES


def test_check_prices_the_three_passes_like_the_training_graph(tmp_path, docs_tool):
    rows = []
    for p_ in PASSES:
        p = {"model": "gpt-oss-120b", "product": "gate_up", "pass": p_, "experts": 16, "rows": 1024, "k": 2880,
             "n": 5760, "dtype": "bf16"}
        rows.append({"kind": "grouped_gemm", "params": p, "time_s": 1e-3})
    (tmp_path / "measurements.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tool = docs_tool("grouped_gemm_check.py")
    prices = tool.priced(tool.measured_rows(tmp_path))
    assert all(t > 0 for t in prices)
    # the weight gradient also reads and writes the fp32 main gradient: never cheaper than the data gradient
    assert prices[2] >= prices[1] * 0.99
    result = tool.compare(tmp_path)
    assert result[("pass", "bf16", "fwd", 1024)]["n"] == 1


def test_check_without_measurements_says_so_in_one_line(tmp_path, capsys, docs_tool):
    """A folder without measured rows: the tool says where the rows come from instead of a FileNotFoundError
    traceback."""
    import pytest

    tool = docs_tool("grouped_gemm_check.py")
    with pytest.raises(SystemExit) as e:
        tool.compare(tmp_path)
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "no measurements at" in err


# --- the grouped efficiency fitted from these rows (perfmodel.fit.training.fit_grouped) and its use ---------------

def _synthetic_rows(eta: dict, rows0: dict) -> list[dict]:
    """Rows measured as the model says a grouped kernel of known parameters runs: the dense GEMM model's time (as
    the fit prices each product) over ``eta`` times ``1 + rows0 / rows``, per pass."""
    from perfmodel.fit.training import grouped_parts
    from perfmodel.profile import DEFAULTS
    from perfmodel.spec import load_spec
    from perfmodel.train.cost import training_params

    hw = load_spec("h200-sxm")
    rows = []
    for model, hidden, width in (("a", 2880, 2880), ("b", 2048, 768), ("c", 7168, 2048)):
        for e in (4, 32):
            for r in (128, 512, 4096):
                for p_ in PASSES:
                    p = {"model": model, "product": "gate_up", "pass": p_, "experts": e, "rows": r, "k": hidden,
                         "n": 2 * width, "dtype": "bf16"}
                    rows.append({"kind": "grouped_gemm", "params": p, "time_s": 1.0})
    parts = grouped_parts(rows, hw, DEFAULTS, training_params(DEFAULTS))
    for row, (_, model_s, r) in zip(rows, parts):
        p_ = row["params"]["pass"]
        row["time_s"] = model_s / eta[p_] * (1.0 + rows0[p_] / r)
    return rows


def test_fit_recovers_the_parameters_rows_were_made_with():
    from perfmodel.fit.training import fit_grouped
    from perfmodel.profile import DEFAULTS
    from perfmodel.spec import load_spec

    eta = {"fwd": 0.85, "dgrad": 0.9, "wgrad": 0.8}
    rows0 = {"fwd": 10.0, "dgrad": 0.0, "wgrad": 40.0}
    entries, summary = fit_grouped(_synthetic_rows(eta, rows0), load_spec("h200-sxm"), DEFAULTS)
    for p_ in PASSES:
        assert abs(entries["grouped_gemm_eta"][f"bf16.{p_}"] - eta[p_]) < 1e-4
        assert abs(entries["grouped_gemm_rows0"][f"bf16.{p_}"] - rows0[p_]) < 0.05
    assert summary["bf16"]["fitted"]["median_abs_error"] < 1e-4
    assert summary["bf16"]["dense_model"]["median_abs_error"] > 0.05
    # leave-one-model-out: the other two models' rows give the same parameters back, so the held-out error is nil
    assert all(v["median_abs_error"] < 1e-3 for v in summary["bf16"]["held_out_by_model"].values())


def _expert_and_dense_ops():
    """A MoE layer's training ops (forward and backward) on one GPU: routed experts, shared experts, attention
    (DeepSeek-V3: one shared expert beside the routed ones)."""
    from perfmodel.resolve import resolve_model
    from perfmodel.train.graph import backward, layer_forward
    from perfmodel.train.scenario import TrainScenario

    model = resolve_model("deepseek-v3")
    ts = TrainScenario(gpus=8, ep=8, global_batch=8, seq=4096, dtype="bf16")
    fwd = layer_forward(model, ts)
    return fwd + backward(fwd, ts)


def test_factor_applies_to_expert_products_only_and_defaults_price_as_before():
    from perfmodel.profile import DEFAULTS
    from perfmodel.spec import load_spec
    from perfmodel.train.cost import TRAIN_DEFAULTS, grouped_factor, time_train_op, training_params
    from perfmodel.train.graph import expert_pass

    hw = load_spec("h200-sxm")
    base = training_params(DEFAULTS)  # a profile without grouped rows
    assert base["grouped_gemm_eta"] == {} == TRAIN_DEFAULTS["grouped_gemm_eta"]
    fitted = {**base, "grouped_gemm_eta": {"bf16.fwd": 0.8, "bf16.dgrad": 0.9, "bf16.wgrad": 0.7},
              "grouped_gemm_rows0": {"bf16.fwd": 8.0, "bf16.dgrad": 0.0, "bf16.wgrad": 32.0}}
    ops = _expert_and_dense_ops()
    seen = set()
    for t in ops:
        if t.is_comm:
            continue
        before, _ = time_train_op(t, hw, DEFAULTS, base)
        after, _ = time_train_op(t, hw, DEFAULTS, fitted)
        step = expert_pass(t)
        assert grouped_factor(t, base) == 1.0
        if step is None:  # dense products (attention, router, shared experts) and every other kernel: unchanged
            assert after == before, t.name
            continue
        seen.add(step)
        rows = t.op.params["k"] if step == "wgrad" else t.op.params["m"]
        want = (1.0 + fitted["grouped_gemm_rows0"][f"bf16.{step}"] / rows) / fitted["grouped_gemm_eta"][f"bf16.{step}"]
        assert after > before and abs(after / before - want) < 1e-9, t.name
    assert seen == {"fwd", "dgrad", "wgrad"}
    assert any(t.name.startswith("moe.shared") and t.op.kind == "gemm" for t in ops)  # dense, unchanged above


def test_fit_training_keeps_the_grouped_efficiency_and_none_calibration_has_none(tmp_path):
    """Refitting the training rows onto a profile (train.validate --training-rows) keeps its grouped efficiency;
    --calibration none prices expert products by the dense model alone and says so."""
    import json as _json

    from perfmodel.fit.training import fit_training
    from perfmodel.measure.store import read_rows
    from perfmodel.paths import calibration_dir
    from perfmodel.profile import DEFAULTS
    from perfmodel.resolve import resolve_profile
    from perfmodel.spec import load_spec
    from perfmodel.train.project import assumptions
    from perfmodel.resolve import resolve_model
    from perfmodel.train.scenario import TrainScenario

    hw = load_spec("h200-sxm")
    prof = resolve_profile(None, hw, "torch")
    assert prof.training["grouped_gemm_eta"]  # the committed H200 fit
    kernels = [r for r in read_rows(calibration_dir() / "h200" / "measurements.jsonl") if r.get("kind") == "train_kernel"]
    refit, _ = fit_training(prof, kernels, hw)
    assert refit.training["grouped_gemm_eta"] == prof.training["grouped_gemm_eta"]
    assert refit.training["grouped_gemm_rows0"] == prof.training["grouped_gemm_rows0"]
    none = resolve_profile("none", hw, "torch")
    assert not (none.training or {}).get("grouped_gemm_eta")
    ts = TrainScenario(gpus=8, ep=8, global_batch=8, seq=4096, dtype="bf16")
    model = resolve_model("qwen3-30b-a3b")
    assert any("dense GEMM model's rate: no grouped-gemm measurements" in a for a in assumptions(hw, model, ts, none))
    assert any("grouped kernel's rate relative to the dense GEMM model (per pass, bf16 measured on" in a
               for a in assumptions(hw, model, ts, prof))
    _json.dumps(prof.training)  # stays a JSON document


def test_carried_to_another_part_the_grouped_ratio_stays_as_measured():
    """The grouped efficiency is a ratio to the dense GEMM model on the measured part: carried unchanged (the dense
    model's own efficiency carries by the GEMM family's rule), the same in the profile a projection composes."""
    from perfmodel.profile import load_profile
    from perfmodel.paths import calibration_dir
    from perfmodel.resolve import resolve_profile
    from perfmodel.spec import load_spec
    from perfmodel.transfer import carry

    h200 = load_profile(calibration_dir() / "h200" / "profile.json")
    src = load_spec("h200-sxm")
    for part in ("h100-sxm", "b200", "a100-sxm-80gb"):
        hw = load_spec(part)
        carried = carry(h200, src, hw)
        assert carried.carried_from
        for key in ("grouped_gemm_eta", "grouped_gemm_rows0"):
            assert carried.training[key] == h200.training[key]
        assert carried.gemm_eta["bf16"] != h200.gemm_eta["bf16"] or part == "h100-sxm"
        # a projection takes the ratios of the suite its training family came from, unchanged
        composed = resolve_profile(None, hw, "torch")
        source = load_profile(calibration_dir() / composed.provenance["families"]["training"]["profile"])
        for key in ("grouped_gemm_eta", "grouped_gemm_rows0"):
            assert composed.training[key] == source.training[key], (part, key)


def test_profile_rejects_a_negative_per_expert_cost(tmp_path):
    import pytest

    from perfmodel.errors import InputError
    from perfmodel.paths import calibration_dir
    from perfmodel.profile import load_profile

    doc = json.loads((calibration_dir() / "h200" / "profile.json").read_text())
    doc["training"]["grouped_gemm_rows0"]["bf16.wgrad"] = -1.0
    (tmp_path / "profile.json").write_text(json.dumps(doc))
    with pytest.raises(InputError):
        load_profile(tmp_path / "profile.json")
    doc["training"]["grouped_gemm_rows0"]["bf16.wgrad"] = 0.0  # none is a fit's answer too
    (tmp_path / "profile.json").write_text(json.dumps(doc))
    load_profile(tmp_path / "profile.json")


# --- fp8: the scaled grouped kernel's layouts, and the accumulation a fit takes per pass ------------------------

def test_fp8_cases_measure_each_pass_both_ways_and_keep_the_bf16_ids():
    from perfmodel.measure.store import make_id

    cases = grouped_cases()
    fp8 = [c for c in cases if c.params["dtype"] == "fp8"]
    bf16 = [c for c in cases if c.params["dtype"] == "bf16"]
    assert len(fp8) == 2 * len(bf16) > 0
    assert {c.params["fast_accum"] for c in fp8} == {True, False}
    # the bf16 rows measured before fp8 existed keep their ids (a --resume run does not measure them again)
    assert all("fast_accum" not in c.params and c.id == make_id("grouped_gemm", c.params) for c in bf16)


def test_fp8_operands_are_in_the_layouts_the_scaled_grouped_kernel_takes():
    """Every fp8 case's operands pass ``torch._scaled_grouped_mm``'s own checks (its meta function, no GPU) and
    give the output the pass writes: [M, N] forward, [M, K] data gradient, [E, K, N] weight gradient."""
    import pytest

    torch = pytest.importorskip("torch")
    from perfmodel.measure.grouped_gemm import fp8_operands

    if not hasattr(torch, "_scaled_grouped_mm"):
        pytest.skip("this torch has no _scaled_grouped_mm")
    for c in grouped_cases(quick=True, formats=("fp8",)):
        p = c.params
        a, b, sa, sb, offs = fp8_operands(p, "meta")
        out = torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16,
                                       use_fast_accum=p["fast_accum"])
        m = p["experts"] * p["rows"]
        want = {"fwd": [m, p["n"]], "dgrad": [m, p["k"]], "wgrad": [p["experts"], p["k"], p["n"]]}[p["pass"]]
        assert list(out.shape) == want, p


def test_fp8_fit_takes_fast_rows_and_prices_split_passes_by_the_dense_ratio():
    """fp8 rows fit ``fp8.<pass>`` from their fast-accumulation rows, every pass (the stand-in kernel's own split
    accumulation is not TransformerEngine's cuBLAS one); a pass the recipe splits then costs the dense products'
    measured split-over-fast ratio more, the forward (fast) that ratio less than the split-fitted dense model."""
    from perfmodel.fit.training import fit_grouped, grouped_usable
    from perfmodel.profile import DEFAULTS
    from perfmodel.spec import load_spec
    from perfmodel.train.cost import accumulation_factor, grouped_factor, training_params
    from perfmodel.train.graph import FP8_FAST_ACCUMULATION

    c = 1.25
    prof = DEFAULTS.with_(training={"fp8_split_over_fast": c})
    eta = {"fwd": 0.85, "dgrad": 0.9, "wgrad": 0.8}
    rows0 = {"fwd": 10.0, "dgrad": 0.0, "wgrad": 40.0}
    rows = []
    for r in _synthetic_rows(eta, rows0):  # bf16-priced rows as the known grouped kernel runs them
        for fast in (True, False):
            p = {**r["params"], "dtype": "fp8", "scaling": "row", "fast_accum": fast}
            rows.append({**r, "params": p, "time_s": 1.0})
    hw = load_spec("h200-sxm")
    from perfmodel.fit.training import grouped_parts
    parts = grouped_parts(rows, hw, prof, training_params(prof))
    for row, (_, model_s, r) in zip(rows, parts):  # measured = the fast model's time at known parameters
        p_ = row["params"]["pass"]
        row["time_s"] = model_s / eta[p_] * (1.0 + rows0[p_] / r) * (1.0 if row["params"]["fast_accum"] else 3.0)
    usable = grouped_usable(rows)
    assert len(usable) == len(rows) // 2 and all(r["params"]["fast_accum"] for r in usable)
    entries, _ = fit_grouped(rows, hw, prof)
    for p_ in PASSES:
        assert abs(entries["grouped_gemm_eta"][f"fp8.{p_}"] - eta[p_]) < 1e-3
    # pricing: the forward fast (1 / c on the dense model), the gradients split (1)
    ops = [t for t in _expert_and_dense_ops() if t.op.kind == "gemm"]
    params = training_params(prof)
    from dataclasses import replace as _replace
    for t in ops:
        fp8 = _replace(t, op=_replace(t.op, params={**t.op.params, "dtype": "fp8"}))
        want = 1.0 / c if FP8_FAST_ACCUMULATION.get(t.role, False) else 1.0
        assert accumulation_factor(fp8, params) == want, t.name
        assert accumulation_factor(t, params) == 1.0  # bf16
        block = _replace(fp8, op=_replace(fp8.op, params={**fp8.op.params, "scaling": "block"}))
        assert accumulation_factor(block, params) == 1.0  # block scaling splits every pass
    assert grouped_factor(ops[0], params) == 1.0  # no grouped parameters in this profile


def test_check_reports_fp8_against_bf16_and_split_against_fast(tmp_path, docs_tool):
    rows = []
    for p_ in PASSES:
        base = {"model": "gpt-oss-120b", "product": "gate_up", "pass": p_, "experts": 16, "rows": 1024, "k": 2880,
                "n": 5760}
        rows.append({"kind": "grouped_gemm", "params": {**base, "dtype": "bf16"}, "time_s": 2e-3})
        rows.append({"kind": "grouped_gemm", "params": {**base, "dtype": "fp8", "scaling": "row", "fast_accum": True},
                     "time_s": 1e-3})
        rows.append({"kind": "grouped_gemm", "params": {**base, "dtype": "fp8", "scaling": "row", "fast_accum": False},
                     "time_s": 1.2e-3})
    (tmp_path / "measurements.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tool = docs_tool("grouped_gemm_check.py")
    result = tool.compare(tmp_path)
    ratios = result["ratios"]["h200-sxm"]  # rows that name no device: the profile's part
    assert ratios["split_over_fast"] == {p: 1.2 for p in sorted(PASSES)}
    assert ratios["fp8_over_bf16"] == {"dgrad": 0.6, "fwd": 0.5, "wgrad": 0.6}
    assert result[("all", "fp8", "every product", "")]["n"] == 3
    assert "fp8 split accumulation" in tool.table(result, True)


def test_split_over_fast_is_the_compute_bound_median():
    """fp8_split_over_fast: the median split/fast time over products whose fast run reaches half the part's fp8
    rate; streaming-bound products (alike either way) are left out, unpaired ones too."""
    from perfmodel.fit.training import fit_fp8_accumulation
    from perfmodel.spec import load_spec

    hw = load_spec("h100-sxm")
    peak = hw.tensor_flops["fp8"]
    rows = []
    for i, ratio in enumerate((1.04, 1.06, 1.10)):  # compute-bound: fast at 0.6 of the peak
        m = n = k = 4096 + 128 * i
        fast = 2.0 * m * n * k / (0.6 * peak)
        rows += [{"kind": "gemm", "params": {"m": m, "n": n, "k": k, "dtype": "fp8", "fast_accum": True}, "time_s": fast},
                 {"kind": "gemm", "params": {"m": m, "n": n, "k": k, "dtype": "fp8", "fast_accum": False},
                  "time_s": fast * ratio}]
    slow = 2.0 * 4 * 8192 * 8192 / (0.01 * peak)  # a decode-sized product, streaming-bound
    rows += [{"kind": "gemm", "params": {"m": 4, "n": 8192, "k": 8192, "dtype": "fp8", "fast_accum": f},
              "time_s": slow * (1.5 if not f else 1.0)} for f in (True, False)]
    rows.append({"kind": "gemm", "params": {"m": 64, "n": 64, "k": 64, "dtype": "fp8", "fast_accum": True}, "time_s": 1e-6})
    entries, summary = fit_fp8_accumulation(rows, hw)
    assert abs(entries["fp8_split_over_fast"] - 1.06) < 1e-12
    assert summary["n"] == 3 and summary["pairs"] == 4
    assert fit_fp8_accumulation(rows[-3:], hw) == ({}, {})


def test_a_folder_measured_on_another_part_is_priced_there(tmp_path):
    """grouped-gemm-<part>/ beside grouped-gemm/: its rows are priced on the part its environment names (nvidia-smi's
    name for the H100 SXM resolves through the spec's alias), with the profile carried there; a format only it
    measured is fitted from it."""
    import shutil

    from perfmodel.fit.directory import grouped_sources, match_spec
    from perfmodel.paths import calibration_dir
    from perfmodel.resolve import resolve_hardware
    from perfmodel.profile import load_profile

    assert match_spec({"device_name": "NVIDIA H100 80GB HBM3"}, None).key == "h100-sxm"
    src = calibration_dir() / "h200"
    for name in ("grouped-gemm", "grouped-gemm-h100"):
        shutil.copytree(src / name, tmp_path / name)
    hw = resolve_hardware("h200-sxm")
    prof = load_profile(src / "profile.json")
    own, elsewhere = grouped_sources(tmp_path, hw, prof)
    assert own and len(elsewhere) == 1
    other = elsewhere[0]
    assert other.hw.key == "h100-sxm" and other.prof.carried_from == "h200-sxm"
    from perfmodel.fit.training import fit_grouped
    entries, summary = fit_grouped(own, hw, prof, elsewhere=elsewhere)
    assert entries["grouped_gemm_measured_on"] == {"bf16": "NVIDIA H200", "fp8": "NVIDIA H100 80GB HBM3"}
    assert "NVIDIA H100 80GB HBM3" in summary["bf16"]["other_parts"]  # the carry rule's check
    assert summary["fp8"]["part"] == "h100-sxm"


def test_a_suite_takes_the_side_measurements_made_on_its_part_wherever_they_were_filed():
    """The H100's expert products and fp8 accumulation pairs sit beside the H200's suite (measured before the H100 had
    a suite of its own): the H100's suite fits them as its own, the H200's keeps its own; a folder outside the
    calibration tree takes only what is beside it."""
    from perfmodel.fit.directory import ACCUMULATION_DIR, GROUPED_DIR, side_folders
    from perfmodel.paths import calibration_dir
    from perfmodel.profile import load_profile
    from perfmodel.spec import load_spec

    h100, h200 = load_spec("h100-sxm"), load_spec("h200-sxm")
    tree = calibration_dir()
    for prefix in (GROUPED_DIR, ACCUMULATION_DIR):
        found = side_folders(tree / "h100-sxm", prefix, h100)
        assert found and all(part.key == "h100-sxm" for _, _, part in found)
        assert all(f.parent.name == "h200" for f, _, _ in found)
    own = side_folders(tree / "h200", GROUPED_DIR, h200)
    assert {f.name for f, _, _ in own} == {"grouped-gemm", "grouped-gemm-h100"}  # its own, as before
    assert side_folders(tree / "h100-sxm", GROUPED_DIR, None) == []
    prof = load_profile(tree / "h100-sxm")
    assert prof.training["grouped_gemm_measured_on"] == {"bf16": "NVIDIA H100 80GB HBM3", "fp8": "NVIDIA H100 80GB HBM3"}
