"""Hostile inputs, second round (issue 19): unbounded work and unreadable paths.

Trace import in linear time (checked against a brute-force reference, never timed: benchmarks/bench_trace.py
has the speed figure), JSON nesting capped before the parser recurses (trace, sidecar, serve JSONL, profile,
calibration folder), NaN or negative kernel durations skipped with a counted warning, all outputs checked and
written together, and path components over 255 bytes (ENAMETOOLONG) a one-line error in every reader.
"""
from __future__ import annotations

import gzip
import json
import os
import random
import shutil
from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests/data/traces"
TRACE = FIX / "synthetic_llama_prefill.json.gz"
SIDECAR = FIX / "synthetic_llama_prefill.sidecar.json"
LONG = "a" * 300  # one path component over NAME_MAX (255 bytes)


def fails_with_one_line(argv, capsys, *words) -> str:
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert rc == 2, (rc, err, cap.out[-500:])
    lines = [x for x in err.splitlines() if not x.startswith("perfmodel: warning:")]
    assert len(lines) == 1 and lines[0].startswith("perfmodel: error:"), err
    assert "Traceback" not in err
    for w in words:
        assert w.lower() in err.lower(), (w, err)
    return err


def _trace_events(tmp_path, mutate) -> Path:
    with gzip.open(TRACE, "rb") as fh:
        doc = json.loads(fh.read())
    mutate(doc["traceEvents"])
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    shutil.copy(SIDECAR, tmp_path / "t.sidecar.json")
    return p


# --- linear-time annotation lookup -------------------------------------------------------------------------

def _brute(ranges, t):
    best, best_len = "", float("inf")
    for s, e, name in sorted(ranges):
        if s <= t <= e and e - s <= best_len:
            best, best_len = name, e - s
    return best


def test_innermost_sweep_matches_brute_force():
    from perfmodel.trace.reader import _innermost_all

    rng = random.Random(7)
    ranges = []
    for i in range(300):
        s = rng.uniform(0, 1000)
        ranges.append((s, s + rng.expovariate(1 / 50), f"r{i}"))
    times = [rng.uniform(-10, 1100) for _ in range(2000)] + [None]
    got = _innermost_all(ranges, times)
    want = [_brute(ranges, t) if t is not None else "" for t in times]
    assert got == want


# --- JSON nesting ------------------------------------------------------------------------------------------

def test_json_depth_ignores_brackets_in_strings():
    from perfmodel.io import json_depth

    assert json_depth(b'{"a": [1, [2]], "b": "[[[[\\"[[", "c": "\\\\"}') == 3
    assert json_depth("[" * 5000 + "]" * 5000) == 5000
    assert json_depth(b"") == 0


def test_deep_trace_refused(tmp_path, capsys):
    t = tmp_path / "deep.json"
    t.write_text('{"traceEvents": [' + "[" * 100_000 + "]" * 100_000 + "]}")
    shutil.copy(SIDECAR, tmp_path / "deep.sidecar.json")
    fails_with_one_line(["trace", "import", t, "--calibration", "none", "--out-dir", tmp_path], capsys,
                        "deep.json", "nested")
    assert not list(tmp_path.glob("*.residuals.*"))


def test_deep_sidecar_refused(tmp_path, capsys):
    side = tmp_path / "side.json"
    side.write_text('{"model": ' + "[" * 100_000 + "]" * 100_000 + "}")
    fails_with_one_line(["trace", "import", TRACE, "--sidecar", side, "--calibration", "none", "--out-dir",
                         tmp_path], capsys, "side.json", "nested")


def test_deep_serve_jsonl_refused(tmp_path, capsys):
    p = tmp_path / "reqs.jsonl"
    p.write_text('{"arrival_s": 0, "isl": 10, "osl": 5}\n{"x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    fails_with_one_line(["serve", "--arch", "h200", "--model", "llama8b", "--arrival", "trace", p], capsys,
                        "reqs.jsonl", "nested")


def test_deep_profile_refused(tmp_path, capsys):
    p = tmp_path / "profile.json"
    p.write_text('{"gemm_eta": ' + "[" * 100_000 + "]" * 100_000 + "}")
    fails_with_one_line(["project", "--arch", "h200", "--model", "llama8b", "--calibration", p], capsys,
                        "profile.json", "nested")


def test_deep_calibration_folder_refused(tmp_path, capsys):
    (tmp_path / "environment.json").write_text('{"env": ' + "[" * 100_000 + "]" * 100_000 + "}")
    fails_with_one_line(["fit", tmp_path], capsys, "environment.json", "nested")


# --- kernel durations --------------------------------------------------------------------------------------

def _set_dur(values):
    def mutate(events):
        ks = [e for e in events if e.get("cat") == "kernel"]
        for e, v in zip(ks, values):
            e["dur"] = v
    return mutate


def test_nan_and_negative_durations_skipped_with_a_count(tmp_path, capsys):
    from perfmodel.trace.reader import read_trace

    p = _trace_events(tmp_path, _set_dur(["NaN", -5.0, None, 1e300]))
    capsys.readouterr()
    total = len(read_trace(TRACE))
    ks = read_trace(p)
    err = capsys.readouterr().err
    assert len(ks) == total - 4
    assert "skipped 4 of" in err and err.count("\n") == 1
    rc = main(["trace", "import", str(p), "--calibration", "none", "--out-dir", str(tmp_path)])
    assert rc == 0


def test_no_usable_duration_refused(tmp_path, capsys):
    p = _trace_events(tmp_path, _set_dur([float("nan")] * 10_000))
    fails_with_one_line(["trace", "import", p, "--calibration", "none", "--out-dir", tmp_path], capsys,
                        "t.json", "usable duration")


# --- outputs checked first, written together ---------------------------------------------------------------

@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_refit_to_dev_full_writes_nothing(tmp_path, capsys):
    shutil.copy(TRACE, tmp_path / TRACE.name)
    shutil.copy(SIDECAR, tmp_path / SIDECAR.name)
    fails_with_one_line(["trace", "import", tmp_path / TRACE.name, "--calibration", "none", "--refit",
                         "/dev/full"], capsys, "/dev/full")
    assert not list(tmp_path.glob("*.residuals.*"))


def test_trace_out_dir_missing_refused_before_reading(tmp_path, capsys):
    fails_with_one_line(["trace", "import", TRACE, "--calibration", "none", "--out-dir", tmp_path / "nope"],
                        capsys, "does not exist")
    assert not (tmp_path / "nope").exists()


# --- path components over 255 bytes ------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["project", "--arch", LONG + ".yaml", "--model", "llama8b"],
    ["project", "--arch", "h200", "--model", LONG + ".yaml"],
    ["project", "--arch", "h200", "--model", "llama8b", "--calibration", LONG],
    ["trace", "import", LONG + ".json", "--calibration", "none"],
    ["trace", "import", str(TRACE), "--sidecar", LONG + ".json", "--calibration", "none"],
    ["serve", "--arch", "h200", "--model", "llama8b", "--arrival", "trace", LONG + ".jsonl"],
    ["fit", LONG],
    ["predict", "--arch", "h200", "--ops", LONG + ".csv"],
    ["validate", "--csv", LONG + ".csv"],
])
def test_name_too_long_one_line(argv, capsys):
    fails_with_one_line(argv, capsys, "aaaa")


def test_read_input_bytes_names_the_file(tmp_path):
    from perfmodel.io import read_input_bytes

    with pytest.raises(InputError, match="cannot read a thing"):
        read_input_bytes(tmp_path / LONG, what="a thing")
    with pytest.raises(InputError, match="is a folder"):
        read_input_bytes(tmp_path, what="a thing")
    (tmp_path / "big").write_bytes(b"x" * 2048)
    with pytest.raises(InputError, match="larger than 1 KiB"):
        read_input_bytes(tmp_path / "big", what="a thing", max_bytes=1024)


# --- request counts ----------------------------------------------------------------------------------------

SERVE = ["serve", "--arch", "h200", "--model", "llama8b"]


@pytest.mark.parametrize("argv,words", [
    (SERVE + ["--rate", "5", "--requests", "1e9"], ["--requests", "at most 1,000,000", "KB per request"]),
    (SERVE + ["--rate", "5", "--requests", "1000000001"], ["--requests", "memory"]),
    (SERVE + ["--concurrency", "1000000"], ["--concurrency", "at most 1,000,000"]),
    (SERVE + ["--concurrency", "8", "--requests", "2e6"], ["--requests", "at most"]),
    (["plan", "--arch", "h200", "--model", "llama8b", "--gpus", "8", "--slo-ttft-ms", "500", "--requests", "1e6"],
     ["--requests", "at most 100,000", "every layout"]),
    (SERVE + ["--rate", "5", "--requests", "1e400"], ["--requests", "integer"]),
    (SERVE + ["--rate", "5", "--requests", "1.5"], ["--requests", "integer"]),
])
def test_request_counts_capped(argv, words, capsys):
    fails_with_one_line(argv, capsys, *words)


def test_request_count_as_float_notation_accepted(capsys):
    assert main(SERVE + ["--rate", "5", "--requests", "2e1", "--isl", "64", "--osl", "4"]) == 0
    assert "20" in capsys.readouterr().out


def test_serve_trace_over_the_cap_refused(tmp_path, capsys, monkeypatch):
    import perfmodel.serve.workload as W

    monkeypatch.setattr(W, "MAX_REQUESTS", 5)
    p = tmp_path / "reqs.csv"
    p.write_text("arrival_s,isl,osl\n" + "".join(f"{i},10,5\n" for i in range(10)))
    fails_with_one_line(SERVE + ["--arrival", "trace", p], capsys, "reqs.csv", "more than 5", "split")


# --- writers refuse a missing folder, before any work ------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["report", "--arch", "b200", "--baseline", "h100", "--model", "llama8b", "--out", "{d}/r.html"],
    ["export", "--arch", "h200", "--model", "llama8b", "--out", "{d}/x.xlsx"],
    ["export", "--arch", "h200", "--model", "llama8b", "--format", "csv", "--out", "{d}/"],
    ["export", "--arch", "h200", "--model", "llama8b", "--format", "csv", "--out", "{d}/t"],
    ["sweep", "--arch", "h200", "--model", "llama8b", "--vary", "batch=1,2", "--out", "{d}/s.csv"],
    ["sweep", "--arch", "h200", "--model", "llama8b", "--vary", "batch=1,2", "--plot", "{d}/s.svg"],
    ["trace", "import", str(TRACE), "--calibration", "none", "--out-dir", "{d}"],
    ["trace", "import", str(TRACE), "--calibration", "none", "--refit", "{d}/p.json"],
    ["project", "--arch", "h200", "--model", "llama8b", "--out", "{d}/p.txt"],
    ["serve", "--arch", "h200", "--model", "llama8b", "--rate", "5", "--requests", "20", "--out", "{d}/s.txt"],
])
def test_writers_refuse_a_missing_folder(argv, tmp_path, capsys, monkeypatch):
    import perfmodel.resolve as R

    def no_work(*a, **k):
        raise AssertionError("computed before the output folder was checked")

    monkeypatch.setattr(R, "resolve_model", no_work)
    missing = tmp_path / "no" / "such"
    fails_with_one_line([a.replace("{d}", str(missing)) for a in argv], capsys, "does not exist")
    assert not (tmp_path / "no").exists()


def test_atomic_writer_never_creates_folders(tmp_path):
    from perfmodel.io import write_files_atomic, write_text_atomic

    with pytest.raises(InputError, match="does not exist"):
        write_text_atomic(tmp_path / "a" / "b.txt", "x")
    with pytest.raises(InputError, match="does not exist"):
        write_files_atomic({tmp_path / "ok.txt": "x", tmp_path / "a" / "b.txt": "y"})
    assert not (tmp_path / "ok.txt").exists() and not (tmp_path / "a").exists()


# --- profile parameters in a physical range ----------------------------------------------------------------

@pytest.mark.parametrize("field,value,words", [
    ("gemm_overhead_s", 1e308, ["gemm_overhead_s", "under 1 s"]),
    ("gemm_overhead_s", 2.0, ["gemm_overhead_s", "under 1 s"]),
    ("launch_eager_s", -1e-6, ["launch_eager_s", "positive"]),
    ("gemm_grouped_overhead_s", 5.0, ["gemm_grouped_overhead_s", "under 1 s"]),
    ("gemm_grouped_overhead_s", -1.0, ["gemm_grouped_overhead_s"]),
    ("gemm_mem_eta", 1.7, ["gemm_mem_eta", "(0, 1.5]"]),
    ("gemm_eta", {"bf16": 1.6}, ["gemm_eta.bf16", "(0, 1.5]"]),
    ("gemm_eta", {"bf16": 0}, ["gemm_eta"]),
    ("mem_alpha_s", {"copy": 3.0}, ["mem_alpha_s.copy", "under 1 s"]),
    ("comm_alpha_s", {"all_reduce:8": 10.0}, ["comm_alpha_s.all_reduce:8", "under 1 s"]),
    ("comm_eta", {"all_reduce:8": 2.5}, ["comm_eta.all_reduce:8", "(0, 2]"]),
    ("gemm_wave_q", 3.0, ["gemm_wave_q", "share"]),
    ("gemm_tile_c", 1e300, ["gemm_tile_c", "under 1e+06"]),
    ("attn_block_q", {"flash": 1e9}, ["attn_block_q.flash"]),
    ("carry_spread", 1e308, ["carry_spread"]),
    ("residual_quantiles", {"gemm": [-1e300, 0, 1e300]}, ["residual_quantiles"]),
])
def test_profile_out_of_physical_range_refused(field, value, words, tmp_path, capsys):
    p = tmp_path / "profile.json"
    p.write_text(json.dumps({field: value}))
    fails_with_one_line(["project", "--arch", "h200", "--model", "llama8b", "--calibration", p], capsys,
                        "profile.json", *words)


def test_shipped_profiles_within_range():
    from perfmodel.profile import load_profile

    for p in sorted((ROOT / "calibration").glob("*/profile.json")):
        load_profile(p)
