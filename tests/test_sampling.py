"""Sampling the next tokens from the logits (issue 25: per-step work at large batch): the op, its methods, the
measurement and the fit."""
from __future__ import annotations

import json

import pytest

from perfmodel.cli import main
from perfmodel.fit.sampling import fit_method, fit_sampling
from perfmodel.profile import DEFAULTS
from perfmodel.projection import project, step
from perfmodel.resolve import resolve_hardware
from perfmodel.sampling import SAMPLE_PASSES, SAMPLING_METHODS

KW = dict(tp=1, dtype="fp8", isl=1024, osl=1024, engine="trtllm")




def test_a_decode_step_samples_every_row_over_the_whole_vocabulary():
    """The op reads batch x vocab fp32 logits once (its kind's efficiency holds the passes), after the gather."""
    ph = step("h200-sxm", "qwen3-30b-a3b", "decode", 64, context=1024, tp=2, dtype="fp8", engine="trtllm")
    ops = [t for t in ph.times if t.op.name == "sample"]
    assert len(ops) == 1
    op = ops[0].op
    assert op.kind == "sample_greedy" and op.bytes == pytest.approx(4.0 * 64 * 151936)


def test_the_method_costs_what_its_passes_say_and_grows_with_the_batch():
    small = {m: project("h200-sxm", "qwen3-30b-a3b", batch=8, sampling=m, **KW).tpot_s for m in SAMPLING_METHODS}
    big = {m: project("h200-sxm", "qwen3-30b-a3b", batch=256, sampling=m, **KW).tpot_s for m in SAMPLING_METHODS}
    assert big["top_p"] > big["random"] > big["greedy"]
    assert big["top_p"] - big["greedy"] > 10 * (small["top_p"] - small["greedy"])


def test_an_unknown_method_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["project", "--arch", "h200", "--model", "llama8b", "--sampling", "beam"])
    assert e.value.code == 2
    assert "--sampling" in capsys.readouterr().err


def test_the_fit_recovers_efficiency_and_fixed_cost():
    hw = resolve_hardware("h200-sxm")
    eta, alpha = 0.05, 6e-6
    rows = [{"params": {"batch": b, "vocab": v}, "time_s": alpha + 4.0 * b * v / (hw.hbm_bandwidth * eta)}
            for b in (1, 8, 64, 256, 1024) for v in (128256, 201088)]
    got = fit_method(rows, hw.hbm_bandwidth)
    assert got[0] == pytest.approx(eta, rel=1e-6) and got[1] == pytest.approx(alpha, rel=1e-4)


def test_a_folder_with_sampling_rows_sets_each_measured_kind_and_leaves_the_others(tmp_path):
    hw = resolve_hardware("h200-sxm")
    folder = tmp_path / "sampling"
    folder.mkdir()
    lines = []
    for b in (1, 64, 1024):
        t = 5e-6 + 4.0 * b * 151936 / (hw.hbm_bandwidth * 0.02)
        lines.append(json.dumps({"id": f"s{b}", "kind": "sampling", "time_s": t, "check": "ok", "error": None,
                                 "params": {"method": "top_p", "batch": b, "vocab": 151936}}))
    (folder / "measurements.jsonl").write_text("\n".join(lines) + "\n{\"torn")
    prof, figures = fit_sampling(DEFAULTS, tmp_path, hw)
    assert set(figures) == {"top_p"} and figures["top_p"]["rows"] == 3
    # exact rows: no in-sample error; one vocabulary: nothing to hold out
    assert figures["top_p"]["median_abs_error"] < 1e-6 and figures["top_p"]["held_out_median_abs_error"] is None
    assert prof.mem_eta["sample_top_p"] == pytest.approx(0.02, rel=1e-6)
    assert prof.mem_eta["sample_greedy"] == DEFAULTS.mem_eta["sample_greedy"]
    assert fit_sampling(DEFAULTS, tmp_path / "none", hw) == (DEFAULTS, None)


def test_unmeasured_methods_take_the_reduce_kernel_over_their_passes():
    from perfmodel.fit.latency import _inherit_unmeasured

    prof = _inherit_unmeasured(DEFAULTS.with_(mem_eta={**DEFAULTS.mem_eta, "reduce": 0.8}), {"reduce"})
    for m, n in SAMPLE_PASSES.items():
        assert prof.mem_eta[f"sample_{m}"] == pytest.approx(0.8 / n)


def test_the_measurement_samples_valid_tokens_on_cpu(tmp_path):
    torch = pytest.importorskip("torch")
    from perfmodel.measure.sampling import sampler

    logits = torch.randn(4, 1000)
    for m in SAMPLING_METHODS:
        tok = sampler(m, logits.clone())()
        assert tok.reshape(-1).shape == (4,) and bool(((tok >= 0) & (tok < 1000)).all())
    assert torch.equal(sampler("greedy", logits)(), logits.argmax(-1))


def test_the_held_out_error_fits_each_vocabulary_without_its_rows():
    """Rows of two vocabularies whose fixed cost differs: each held out is priced by the other's fit."""
    from perfmodel.fit.sampling import _errors

    bw = 4.8e12
    rows = [{"params": {"batch": b, "vocab": v}, "time_s": a + 4.0 * b * v / (bw * 0.5)}
            for v, a in ((128256, 40e-6), (151936, 12e-6)) for b in (1, 8, 64, 1024)]
    inside, held = _errors(rows, bw)
    assert 0 < inside < held  # one line through both is closer than each vocabulary priced by the other alone
