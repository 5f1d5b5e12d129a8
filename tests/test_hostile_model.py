"""Hostile and broken inputs to the model side (issue 8): profiles, calibration folders, layouts, non-finite
specs, validation tables; and the wrong results issue 8 lists. Every bad input stops with one line, exit 2.

(The outputs side — files, CSV, YAML, reports, sweeps — is tests/test_hostile_outputs.py.)
"""
from __future__ import annotations

import json
import math
import shutil

import pytest

from perfmodel.cli import main
from perfmodel.graph import Step, build_ops
from perfmodel.models import load_model
from perfmodel.projection import project
from perfmodel.scenario import Scenario
from perfmodel.spec import load_spec

REPO_H200 = "h200"


def _one_line_exit_2(capsys, *argv, needles=()):
    rc = main(list(argv))
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("perfmodel: warning")]
    assert rc == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


# --- profiles ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("body, needle", [
    ("[1, 2, 3]", "JSON object"),
    ('{"gemm_eta": "fast"}', "gemm_eta"),
    ('{"gemm_k0": 0}', "gemm_k0"),
    ('{"gemm_k0": -5}', "gemm_k0"),
    ('{"gemm_k0": NaN}', "NaN"),
    ('{"attn_eta": {"cudnn": Infinity}}', "Infinity"),
    ('{"attn_eta": {"cudnn": 7.5}}', "fractions of peak"),
    ('{"attn_default": {"prefill": "warp-drive"}}', "attn_default"),
    ('{"residual_quantiles": {"gemm": [0.1, 0.0]}}', "residual_quantiles"),
    ('{"fitted": "yes"}', "fitted"),
    ('{"no_such_field": 1}', "unknown profile field"),
    ('{"gemm_k0": 1', "not valid JSON"),
])
def test_bad_profile_is_one_line(tmp_path, capsys, body, needle):
    p = tmp_path / "profile.json"
    p.write_text(body)
    _one_line_exit_2(capsys, "project", "--arch", "h200", "--model", "llama8b", "--calibration", str(p),
                     needles=(needle,))


def test_a_broken_profile_in_calibration_does_not_break_other_parts(tmp_path, monkeypatch, capsys):
    from perfmodel.paths import repo_root

    root = repo_root()
    for sub in ("hardware", "workloads", "templates"):
        (tmp_path / sub).symlink_to(root / sub)
    good = tmp_path / "calibration" / "h200"
    good.mkdir(parents=True)
    shutil.copy(root / "calibration" / "h200" / "profile.json", good / "profile.json")
    bad = tmp_path / "calibration" / "broken"
    bad.mkdir()
    (bad / "profile.json").write_text('{"gemm_k0": "nope"}')
    monkeypatch.setenv("PERFMODEL_ROOT", str(tmp_path))
    assert main(["project", "--arch", "b200", "--model", "llama8b", "--format", "json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["calibration"]["label"].startswith("h200")
    assert "warning: skipping calibration profile" in out.err


# --- fit and calibrate -----------------------------------------------------------------------------------

def _fit_dir(tmp_path, rows: list[str], env: str | None):
    d = tmp_path / "cal"
    d.mkdir()
    good = [json.dumps({"id": f"copy|bytes={b}", "kind": "copy", "params": {"bytes": b}, "time_s": 2e-6 + b / 4e12,
                        "check": "ok", "env": {"device_name": "NVIDIA H200"}}) for b in (2**20, 2**24, 2**28, 2**30)]
    (d / "measurements.jsonl").write_text("\n".join(good + rows) + "\n")
    if env is not None:
        (d / "environment.json").write_text(env)
    return d


def test_fit_survives_malformed_rows_and_a_truncated_environment(tmp_path, capsys):
    junk = ['{"kind": "copy", "time_s": 1e-5}',  # no id, no params
            '{"id": "copy|x", "kind": "copy", "params": {"bytes": 1024}, "time_s": "fast"}',
            '{"id": "copy|y", "kind": "copy", "params": [], "time_s": 1e-5}',
            '"just a string"', '[1, 2]',
            '{"id": "gemm|z", "kind": "gemm", "params": {"m": 1}, "time_s": 1e-5}']  # params incomplete
    d = _fit_dir(tmp_path, junk, env='{"env": {"device_name": "NVIDIA H2')
    assert main(["fit", str(d)]) == 0
    assert (d / "profile.json").is_file()
    assert "not readable JSON" in capsys.readouterr().err


@pytest.mark.parametrize("holdout", ["1.0", "-1", "nan", "inf"])
def test_fit_refuses_a_holdout_outside_0_1(tmp_path, capsys, holdout):
    d = _fit_dir(tmp_path, [], env=None)
    _one_line_exit_2(capsys, "fit", str(d), "--holdout", holdout, needles=("--holdout",))


def test_calibrate_refuses_unknown_families_and_a_missing_gpu(capsys):
    _one_line_exit_2(capsys, "calibrate", "--device", "cpu", "--only", "bogus", needles=("--only", "bogus"))
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        _one_line_exit_2(capsys, "calibrate", "--device", "cuda", "--only", "gemm", needles=("--device",))


# --- layouts no engine runs --------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, needle", [
    (["--model", "llama70b", "--tp", "3"], "does not divide the 64 attention heads"),
    (["--model", "llama70b", "--tp", "128"], "attention heads"),
    (["--model", "llama70b", "--pp", "81"], "81 is more stages than the 80 layers"),
    (["--model", "llama8b", "--isl", "131000", "--osl", "2000"], "context"),
    (["--model", "llama8b", "--tp", "2", "--ep", "2"], "no experts"),
    (["--model", "mixtral", "--tp", "4", "--ep", "4", "--dtype", "fp8"], None),  # fine: 8 experts over 4
])
def test_layouts_no_engine_runs_are_refused(capsys, argv, needle):
    full = ["project", "--arch", "h200", *argv]
    if needle is None:
        assert main(full) == 0
        capsys.readouterr()
        return
    _one_line_exit_2(capsys, *full, needles=(needle,))


def test_tp_that_does_not_divide_the_kv_heads_is_refused(tmp_path, capsys):
    p = tmp_path / "odd-kv.yaml"
    p.write_text("key: odd-kv\nname: Odd KV\nfamily: llama\nhidden: 3072\nlayers: 4\nheads: 24\nkv_heads: 6\n"
                 "head_dim: 128\nintermediate: 8192\nvocab: 32000\n")
    _one_line_exit_2(capsys, "project", "--arch", "h200", "--model", str(p), "--tp", "4", needles=("6 KV heads",))


def test_moe_top_k_above_the_expert_count_is_refused(tmp_path, capsys):
    src = load_model("mixtral")
    text = (f"key: bad-moe\nname: Bad MoE\nfamily: mixtral\nhidden: {src.hidden}\nlayers: 4\nheads: {src.heads}\n"
            f"kv_heads: {src.kv_heads}\nhead_dim: {src.head_dim}\nintermediate: {src.intermediate}\nvocab: {src.vocab}\n"
            "moe: {num_experts: 4, top_k: 6, expert_intermediate: 1024}\n")
    p = tmp_path / "bad-moe.yaml"
    p.write_text(text)
    _one_line_exit_2(capsys, "project", "--arch", "h200", "--model", str(p), needles=("top_k",))


# --- nothing non-finite leaves the tool ----------------------------------------------------------------------

@pytest.mark.parametrize("override", [
    "memory:\n  bandwidth: {value: 1e-300, source: estimate}\n",
    "compute:\n  sm_count: {value: 1e308, source: estimate}\n",
])
def test_absurd_spec_figures_stop_with_one_line(tmp_path, capsys, override):
    base = load_spec("h200").files[-1]  # the root of the chain (h100-sxm.yaml)
    p = tmp_path / "absurd.yaml"
    p.write_text(f"extends: {load_spec('h200').files[0]}\nname: absurd part\n{override}")
    for fmt in ("table", "json"):
        rc = main(["project", "--arch", str(p), "--model", "llama8b", "--format", fmt])
        out = capsys.readouterr()
        assert base
        if rc == 0:  # if it projects at all, every number is finite and the JSON strict
            if fmt == "json":
                json.loads(out.out, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
            assert "inf" not in out.out.lower().split() and "nan" not in out.out.lower().split()
        else:
            assert rc == 2 and len([ln for ln in out.err.splitlines() if ln.strip()]) == 1, out.err


def test_validation_table_with_a_published_zero_or_nan_is_one_line(tmp_path, capsys):
    from perfmodel.validate import default_csv

    rows = default_csv().read_text().splitlines()
    header, first = rows[0], rows[1].split(",")
    col = header.split(",").index("value")
    for bad in ("0", "NaN", "-3", "abc"):
        first[col] = bad
        p = tmp_path / f"v-{bad}.csv"
        p.write_text(header + "\n" + ",".join(first) + "\n")
        _one_line_exit_2(capsys, "validate", "--csv", str(p), needles=("value",))


# --- results issue 8 found wrong ----------------------------------------------------------------------------

def test_tpot_does_not_fall_when_the_batch_grows():
    for arch, model, kw in (("b200", "llama70b", {"tp": 2}), ("h200", "llama8b", {}),
                            ("b200", "llama70b", {"tp": 8, "dtype": "fp8"})):
        prev = 0.0
        for b in list(range(1, 41)) + [64, 96, 128, 256]:
            t = project(arch, model, batch=b, **kw).tpot_s
            assert t >= prev * (1 - 1e-9), (arch, model, b, t, prev)
            prev = t


def test_sol_has_no_band_below_the_bound_and_estimates_widen_bands():
    sol = project("h200", "llama70b", mode="sol")
    for lo, mid, hi in sol.bands.values():
        assert lo == mid == hi
    measured = project("h200", "llama70b").bands["tpot_ms"]
    estimated = project("rubin-estimate", "llama70b").bands["tpot_ms"]
    assert estimated[2] / estimated[0] > measured[2] / measured[0] * 1.15


def test_deepseek_shared_expert_keeps_its_down_projection_under_fused_kernels():
    model = load_model("deepseek-v3")
    for engine in ("trtllm", "torch"):
        ops = build_ops(model, Step("decode", 8, 1, 1024), Scenario(tp=8, engine=engine).for_hardware(None))
        names = [o.name for o in ops]
        assert "moe.shared.down" in names and "moe.shared.gate_up" in names, (engine, names)


def test_step_takes_several_arch(capsys):
    assert main(["step", "--arch", "h200", "--arch", "b200", "--model", "llama8b", "--phase", "decode",
                 "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["arch"]["key"] for d in data] == ["h200-sxm", "b200"]
    assert all(math.isfinite(d["time_ms"]) for d in data)
