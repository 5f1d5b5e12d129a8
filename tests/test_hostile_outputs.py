"""Hostile and careless inputs, output side (issue 8): every documented entry point works, every bad input
stops with one line and exit code 2, no output is lost or half-written.

One section per class; the data files are in tests/hostile/ (README there). The model-side classes
(scenarios, profiles, models) are in tests/test_hostile_model.py.
"""
from __future__ import annotations

import csv
import io
import math
import os
import re
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = Path(__file__).resolve().parent / "hostile"


def fails_with_one_line(argv, capsys, *words) -> str:
    """Run the CLI: exit 2, one line on stderr starting 'perfmodel: error:', no traceback, the words in it."""
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2, (rc, err)
    assert err.startswith("perfmodel: error:") and "\n" not in err, err
    assert "Traceback" not in err
    for w in words:
        assert w.lower() in err.lower(), (w, err)
    return err


# ---------------------------------------------------------------------------------------------------
# 1. The report entry point: the README's command, parallelism per part, matched comparisons, bars that
#    add up, provenance rendered
# ---------------------------------------------------------------------------------------------------


def test_readme_report_command_works_and_states_the_tp_it_chose(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", "--arch", "b200", "--baseline", "h100-sxm", "--model", "llama70b", "--out", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    # H100 (80 GB) needs TP 2 for 141 GB of bf16 weights, B200 (180 GB) fits on one GPU
    assert "NVIDIA H100 SXM5 80GB TP 2 (2 GPUs per replica), TP: the smallest that fits" in text
    assert "NVIDIA B200 (HGX) TP 1 (1 GPU per replica), TP: the smallest that fits" in text
    assert "at the same batch (1 sequence per replica)" in text  # which basis the ratios use


def test_parallelism_per_part(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", "--arch", "b200:tp=4", "--baseline", "h100-sxm:tp=8", "--model", "llama70b",
                 "--out", str(out)]) == 0
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", out.read_text(encoding="utf-8")))
    assert "NVIDIA H100 SXM5 80GB TP 8 (8 GPUs per replica), set for this part (tp=8)" in text
    assert "NVIDIA B200 (HGX) TP 4 (4 GPUs per replica), set for this part (tp=4)" in text
    # a global --tp applies to every part that does not set its own, and is explicit: no search
    fails_with_one_line(["report", "--arch", "b200", "--baseline", "h100-sxm", "--model", "llama70b", "--tp", "1",
                         "--out", tmp_path / "x.html"], capsys, "--tp 2 would fit")
    assert not (tmp_path / "x.html").exists()
    for bad in ("h100-sxm:tp=x", "h100-sxm:tp=0", "h100-sxm:tp=2,tp=4", "h100-sxm:tq=2"):
        fails_with_one_line(["report", "--arch", bad, "--model", "llama8b", "--out", tmp_path / "y.html"], capsys)


def test_parse_part():
    from perfmodel.outputs.report import parse_part

    assert parse_part("h100-sxm").spec == "h100-sxm" and parse_part("h100-sxm").given == {}
    p = parse_part("dir/my:spec.yaml:tp=4,pp=2")
    assert p.spec == "dir/my:spec.yaml" and p.given == {"tp": 4, "pp": 2}


def _parts(arch, baseline, batch, **kw):
    from perfmodel.outputs.report import Part, resolve_part
    from perfmodel.resolve import resolve_model
    from perfmodel.scenario import Scenario
    from perfmodel.outputs.report import parse_part

    model = resolve_model("llama70b")
    sc = Scenario(batch=batch, **kw).validated()
    out = []
    for i, a in enumerate([baseline, *arch]):
        hw, prof, s, proj, note = resolve_part(parse_part(a), model, sc, None,
                                               auto_tp=True)
        out.append(Part(hw, prof, proj, "#000", baseline=i == 0, scenario=s, layout_note=note))
    return out


def test_ratios_at_matched_batch_and_at_matched_latency():
    from perfmodel.outputs.report import compare

    base, b200 = _parts(["b200"], "h100-sxm", 8)
    c = compare(b200, base, "batch")
    assert c["basis"] == "batch" and b200.proj.batch == base.proj.batch == 8
    assert c["thr"] == pytest.approx(b200.proj.throughput_tok_s_per_gpu / base.proj.throughput_tok_s_per_gpu)
    # --batch max: each part at its own largest batch; the ratio holds the baseline's TPOT
    base, b200 = _parts(["b200"], "h100-sxm", "max")
    c = compare(b200, base, "latency")
    assert c["basis"] == "latency" and "TPOT" in c["text"]
    batch = int(re.search(r"batch (\d+) here", c["text"]).group(1))
    from perfmodel.projection import project_resolved

    at = project_resolved(b200.hw, b200.proj.model, b200.proj.scenario.with_(batch=batch), b200.prof)
    assert at.tpot_s <= base.proj.tpot_s * (1 + 1e-9)
    assert c["thr"] == pytest.approx(at.throughput_tok_s_per_gpu / base.proj.throughput_tok_s_per_gpu, rel=1e-6)


@pytest.mark.parametrize("batch, kw", [
    (16, {}),  # eager prefill, graph decode (launch gaps), collectives on the TP 4 baseline
    (16, {"overlap": 0.5}),  # collectives partly hidden
    (1, {"launch": "eager", "isl": 16, "osl": 4}),  # tiny steps: host dispatch floors bind
    (16, {"launch": "graph"}),
    (16, {"mode": "sol"}),
])
def test_latency_bars_add_up_to_the_step_time(batch, kw):
    from perfmodel.outputs.report import _family_times

    seen = set()
    for part in _parts(["b200:tp=2"], "h100-sxm:tp=4", batch, **kw):
        p = part.proj
        for ph in (p.prefill, p.decode):
            bars = _family_times(ph, p.scenario, part.prof)
            assert sum(bars.values()) == pytest.approx(float(ph.time_s), rel=1e-9), (kw, ph.name, bars)
            assert all(v >= 0 for v in bars.values())
            seen |= {k for k, v in bars.items() if v > 0}
    if kw.get("launch") == "eager":
        assert "host" in seen  # the case this parameter is for
    if not kw:
        assert {"comm", "launch gaps"} <= seen


def test_provenance_is_rendered_not_a_raw_dict(tmp_path):
    from perfmodel.outputs.common import validation_rows

    out = tmp_path / "r.html"
    assert main(["report", "--arch", "h200", "--model", "llama8b", "--out", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    prov = html[html.index('id="provenance"'):]
    assert "{" not in re.sub(r"<style.*?</style>", "", prov, flags=re.S)
    assert "median |error|" in prov
    stats, facts = validation_rows({"ops": {"held_out": {"gemm": {"n": 209, "median_abs_error": 0.0448,
                                                                   "p90_abs_error": 0.181}}}, "seed": 0})
    assert stats == [{"what": "ops / held out / gemm", "n": "209", "median": "4.5%", "p90": "18.1%"}]
    assert facts == [("seed", "0")]


def test_default_report_is_never_replaced_without_force(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "report.html").write_text("my notes")
    fails_with_one_line(["report", "--arch", "b200", "--model", "llama8b"], capsys, "report.html exists", "--force")
    assert (tmp_path / "report.html").read_text() == "my notes"
    assert main(["report", "--arch", "b200", "--model", "llama8b", "--force"]) == 0
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    # a path given explicitly is the user's choice: replaced
    (tmp_path / "mine.html").write_text("old")
    assert main(["report", "--arch", "b200", "--model", "llama8b", "--out", "mine.html"]) == 0
    assert (tmp_path / "mine.html").read_text().startswith("<!DOCTYPE html>")


# ---------------------------------------------------------------------------------------------------
# 2. Sweeps: several --arch, and a grid too large to evaluate
# ---------------------------------------------------------------------------------------------------


def test_sweep_with_two_arches_has_an_arch_column(tmp_path, capsys):
    out, plot = tmp_path / "s.csv", tmp_path / "s.svg"
    assert main(["sweep", "--arch", "b200", "--arch", "h200", "--model", "llama8b", "--vary", "batch=1,8,64",
                 "--out", str(out), "--plot", str(plot)]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [r["arch"] for r in rows] == ["b200"] * 3 + ["h200-sxm"] * 3
    assert [r["batch_requested"] for r in rows] == ["1", "8", "64"] * 2
    assert rows[0]["tpot_ms"] != rows[3]["tpot_ms"]
    svg = plot.read_text()
    assert svg.count('class="mark line"') == 2 and "h200-sxm" in svg
    fails_with_one_line(["sweep", "--arch", "b200", "--arch", "b200", "--model", "llama8b", "--vary", "batch=1,2"],
                        capsys, "given twice")


def test_ten_billion_point_sweep_is_refused(capsys):
    err = fails_with_one_line(["sweep", "--arch", "b200", "--model", "llama8b", "--vary",
                               "hbm_bandwidth=1TB/s:2TB/s:100000", "--vary", "sm_count=1:100000:100000"],
                              capsys, "10,000,000,000 points", "1,000,000")
    assert "--vary" in err


# ---------------------------------------------------------------------------------------------------
# 3. Outputs: special files, links, permissions, folders, read-only places, all or nothing
# ---------------------------------------------------------------------------------------------------


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_full_disk_is_one_line_and_dev_full_stays_a_device(capsys):
    fails_with_one_line(["project", "--arch", "h200", "--model", "llama8b", "--out", "/dev/full"], capsys,
                        "/dev/full", "no space left")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_special_file_is_written_through(tmp_path):
    from perfmodel.io import write_text_atomic

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, encoding="utf-8").read()))
    reader.start()
    write_text_atomic(fifo, "through the pipe\n")
    reader.join(10)
    assert got == ["through the pipe\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # not replaced by a regular file


def test_symlink_is_followed_and_permissions_kept(tmp_path):
    from perfmodel.io import write_text_atomic

    target = tmp_path / "real.txt"
    target.write_text("old")
    os.chmod(target, 0o640)
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    write_text_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    dangling = tmp_path / "dangling.txt"
    (tmp_path / "sub").mkdir()
    dangling.symlink_to(tmp_path / "sub" / "made.txt")
    write_text_atomic(dangling, "made")
    assert dangling.is_symlink() and (tmp_path / "sub" / "made.txt").read_text() == "made"
    # a link into a folder that is not there: refused like any missing folder (writers never create folders)
    lost = tmp_path / "lost.txt"
    lost.symlink_to(tmp_path / "gone" / "made.txt")
    with pytest.raises(InputError, match="does not exist"):
        write_text_atomic(lost, "made")
    assert not (tmp_path / "gone").exists()


def test_out_to_a_folder_or_a_read_only_place_is_one_line(tmp_path, capsys):
    base = ["project", "--arch", "h200", "--model", "llama8b", "--out"]
    fails_with_one_line(base + [tmp_path], capsys, "is a folder")
    fails_with_one_line(base + [str(tmp_path) + "/"], capsys, "path separator")
    fails_with_one_line(base + ["/proc/perfmodel-cannot-write-here.txt"], capsys, "cannot")
    fails_with_one_line(["report", "--arch", "h200", "--model", "llama8b", "--out", "/proc/no/such/r.html"], capsys,
                        "does not exist")
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        os.chmod(ro, 0o500)
        try:
            fails_with_one_line(base + [ro / "x.txt"], capsys, "cannot")
        finally:
            os.chmod(ro, 0o700)


def test_several_files_are_written_all_or_nothing(tmp_path, capsys):
    from perfmodel.io import write_files_atomic

    keep = tmp_path / "keep.csv"
    keep.write_text("before")
    with pytest.raises(InputError):
        write_files_atomic({keep: "after", tmp_path / "new.csv": "x", "/proc/no/such/file.csv": "y"})
    assert keep.read_text() == "before" and not (tmp_path / "new.csv").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.csv"]  # no temporary files left
    # export of two parts where the second does not fit: neither part's files are written
    fails_with_one_line(["export", "--format", "csv", "--arch", "b200", "--arch", "a100", "--model", "llama70b",
                         "--out", tmp_path / "t"], capsys, "needs")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.csv"]


# ---------------------------------------------------------------------------------------------------
# 4. One CSV escaping rule for every table
# ---------------------------------------------------------------------------------------------------


def test_csv_safe_rule():
    from perfmodel.io import csv_safe, csv_text

    assert csv_safe("=1+2") == "'=1+2" and csv_safe("+SUM(A1)") == "'+SUM(A1)" and csv_safe("@cmd") == "'@cmd"
    assert csv_safe("-2+3") == "'-2+3" and csv_safe("\tx") == "'\tx"
    assert csv_safe("-2.5e3") == "-2.5e3" and csv_safe(-4) == -4 and csv_safe(1.5) == 1.5  # numbers stay numbers
    assert csv_safe(float("nan")) == "" and csv_safe(float("inf")) == "" and csv_safe(None) == ""
    assert csv_safe(True) == "True" and csv_safe("h100-sxm") == "h100-sxm"
    np = pytest.importorskip("numpy")
    assert csv_safe(np.float64(2.0)) == 2.0 and csv_safe(np.float64("nan")) == ""
    assert csv_text(["a", "b"], [["=x", 1]]) == "a,b\n'=x,1\n"


def _cells(text):
    return [c for row in csv.reader(io.StringIO(text)) for c in row]


def test_every_csv_writer_escapes(tmp_path, capsys):
    # predict: a passthrough note
    out = tmp_path / "p.csv"
    assert main(["predict", "--arch", "h200", "--ops", str(HOSTILE / "predict-formula-note.csv"), "--out", str(out)]) == 0
    notes = [r["note"] for r in csv.DictReader(out.open())]
    assert notes == ["'=HYPERLINK(\"http://evil\")", "'+1-2", "-3.5"]
    # sweep and export: a spec whose name is a formula
    from perfmodel.paths import hardware_dir

    spec = tmp_path / "evil.yaml"
    spec.write_text(f"extends: {hardware_dir() / 'h200-sxm.yaml'}\nname: \"=1+2\"\n")
    from perfmodel.outputs.sweep import parse_vary, run_sweep, sweep_csv
    from perfmodel.outputs.workbook import csv_tables
    from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile
    from perfmodel.scenario import Scenario

    hw = resolve_hardware(str(spec))
    model, prof = resolve_model("llama8b"), resolve_profile("none", hw)
    texts = list(csv_tables(hw, model, Scenario().validated(), prof).values())
    res = run_sweep(hw, model, Scenario().validated(), prof, [parse_vary("batch=1,2")])
    texts.append(sweep_csv(res))
    assert any("'=1+2" in t for t in texts)
    for t in texts:
        for c in _cells(t):
            assert not c.startswith(("=", "+", "@")), c
            assert c not in ("nan", "inf", "-inf", "NaN"), c


# ---------------------------------------------------------------------------------------------------
# 5. Text output
# ---------------------------------------------------------------------------------------------------


def test_table_columns_never_run_together(capsys):
    assert main(["project", "--arch", "b200", "--arch", "h200", "--model", "llama8b", "--batch", "512"]) == 0
    out = capsys.readouterr().out
    assert not re.search(r"tok/s\d|ms\d|%\d", out), out
    for line in out.splitlines():
        if " .. " in line:  # the metric rows: label, P50, band are two spaces apart at least
            assert re.match(r"^  \S.*?\S  +\S.*\S  +\S.* \.\. ", line), line
    from perfmodel.text import table

    assert table([["a", "123456789"], ["bbbb", "1"]], "lr") == ["  a     123456789", "  bbbb          1"]


def test_show_renders_moe_mla_and_int8_ops(capsys):
    assert main(["show", "deepseek-v3"]) == 0
    out = capsys.readouterr().out
    assert "MoE(" not in out and "MLA(" not in out
    assert "256 routed experts, top-8 per token" in out and "KV latent rank 512" in out
    assert main(["show", "h100"]) == 0
    int8 = next(line for line in capsys.readouterr().out.splitlines() if "INT8" in line)
    assert "OPS" in int8 and "FLOP" not in int8
    from perfmodel.outputs.common import field_unit
    from perfmodel.spec import SPEC_FIELDS

    units = {f.attr: field_unit(f) for f in SPEC_FIELDS}
    assert units["tensor_flops.int8"] == "OPS" and units["tensor_flops.bf16"] == "FLOP/s"


def test_show_names_the_problem_of_the_kind_the_file_is(capsys):
    fails_with_one_line(["show", HOSTILE / "model-billion-layers.yaml"], capsys, "layers", "at most 1,024")


# ---------------------------------------------------------------------------------------------------
# 6. Predict tables
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, where, words", [
    ("predict-nan.csv", ":3: m:", ("finite",)),
    ("predict-inf.csv", ":2: n:", ("finite",)),
    ("predict-1e400.csv", ":2: k:", ("finite",)),
    ("predict-not-utf8.csv", ":3: note:", ("utf-8", "0xe9")),
    ("predict-ragged-short.csv", ":3:", ("3 values", "5 columns")),
    ("predict-ragged-long.csv", ":2:", ("6 values", "5 columns")),
    ("predict-duplicate-column.csv", ":1: m:", ("twice",)),
    ("predict-measured-nan.csv", ":2: measured_ms:", ("finite",)),
])
def test_bad_predict_table_is_one_line_naming_line_and_column(name, where, words, capsys):
    err = fails_with_one_line(["predict", "--arch", "h200", "--ops", HOSTILE / name], capsys, *words)
    assert f"{name}{where}" in err, err


def test_huge_cell_is_refused_without_echo(tmp_path, capsys):
    p = tmp_path / "big.csv"
    p.write_text("op,m,n,k,dtype,note\ngemm,1,2,3,bf16," + "x" * 200_000 + "\n")
    err = fails_with_one_line(["predict", "--arch", "h200", "--ops", p], capsys, "big.csv:2: note:", "200,000")
    assert len(err) < 300


# ---------------------------------------------------------------------------------------------------
# 7. YAML safety: bombs, recursion, nesting, duplicates, size, extends outside the library, huge models
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, kind", [
    ("spec-alias-bomb-note.yaml", "arch"),
    ("spec-alias-bomb-ref.yaml", "arch"),
    ("model-alias-bomb-name.yaml", "model"),
])
def test_alias_bombs_stop_at_once(name, kind):
    """In a subprocess with a generous time-out: a regression hangs, and must not hang the suite."""
    args = ["--arch", str(HOSTILE / name), "--model", "llama8b"] if kind == "arch" else \
        ["--arch", "h200", "--model", str(HOSTILE / name)]
    r = subprocess.run([sys.executable, "-m", "perfmodel", "project", *args], capture_output=True, text=True,
                       timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    err = r.stderr.strip()
    assert r.returncode == 2 and "\n" not in err and "values (after expanding aliases)" in err, err
    assert "lol" not in err  # nothing of the expanded value is echoed
    assert f"{name}: line " in err


@pytest.mark.parametrize("name, words", [
    ("spec-recursive-alias.yaml", ("recursive",)),
    ("spec-deep-nesting.yaml", ("nested more than 32 levels",)),
    ("spec-duplicate-key.yaml", ("'name' given twice",)),
])
def test_malformed_yaml_is_one_line(name, words, capsys):
    fails_with_one_line(["project", "--arch", HOSTILE / name, "--model", "llama8b"], capsys, f"{name}: line ", *words)


def test_oversized_files_are_refused_unread(tmp_path, capsys):
    spec = tmp_path / "big.yaml"
    spec.write_text("name: big\nnote: " + "a" * 300_000 + "\n")
    fails_with_one_line(["project", "--arch", spec, "--model", "llama8b"], capsys, "larger than 256 KiB")
    model = tmp_path / "big-model.yaml"
    model.write_text("key: big\nname: big\nnotes: [" + ", ".join(["x"] * 150_000) + "]\n")
    fails_with_one_line(["project", "--arch", "h200", "--model", model], capsys, "larger than 256 KiB")


@pytest.mark.parametrize("name", ["spec-extends-escape.yaml", "spec-extends-passwd.yaml"])
def test_extends_is_confined_and_never_prints_foreign_files(name, capsys):
    err = fails_with_one_line(["project", "--arch", HOSTILE / name, "--model", "llama8b"], capsys, "extends",
                              "outside the spec library")
    if os.path.exists("/etc/passwd"):
        first = Path("/etc/passwd").read_text(errors="replace").splitlines()[0]
        assert first not in err


def test_extends_within_the_library_and_the_folder_still_work(tmp_path):
    from perfmodel.paths import hardware_dir
    from perfmodel.spec import load_spec

    (tmp_path / "base.yaml").write_text((hardware_dir() / "h100-sxm.yaml").read_text())
    (tmp_path / "child.yaml").write_text("extends: base\nname: child\n")
    assert load_spec(tmp_path / "child.yaml").name == "child"
    (tmp_path / "lib.yaml").write_text(f"extends: {hardware_dir() / 'h200-sxm.yaml'}\nname: lib\n")
    assert load_spec(tmp_path / "lib.yaml").hbm_bytes == load_spec("h200").hbm_bytes
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "up.yaml").write_text("extends: ../base.yaml\nname: up\n")
    with pytest.raises(InputError, match="outside the spec library"):
        load_spec(sub / "up.yaml")


def test_billion_layer_models_are_refused(tmp_path, capsys):
    fails_with_one_line(["project", "--arch", "h200", "--model", HOSTILE / "model-billion-layers.yaml"], capsys,
                        "layers: expected at most 1,024")
    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 1e9, '
                   '"num_attention_heads": 32, "intermediate_size": 14336, "vocab_size": 128256}')
    fails_with_one_line(["project", "--arch", "h200", "--model", cfg], capsys, "num_hidden_layers", "at most 1,024")


def test_safe_loader_limits_directly():
    from perfmodel import safeyaml

    assert safeyaml.load("a: &x [1, 2]\nb: *x\n", file="f") == {"a": [1, 2], "b": [1, 2]}  # a few aliases are fine
    with pytest.raises(InputError, match="more than 3 aliases"):
        safeyaml.load("a: &x 1\nb: [*x, *x, *x, *x]\n", file="f", max_aliases=3)
    with pytest.raises(InputError, match=r"f: line 2, column 1: YAML syntax error: .*started at line 1"):
        safeyaml.load("a: [1, 2\n", file="f")
    with pytest.raises(InputError, match="not UTF-8"):
        safeyaml.load(b"a: \xff\n", file="f")
    assert math.isfinite(safeyaml.load("a: 1.5\n", file="f")["a"])
    with pytest.raises(InputError, match="could not determine a constructor"):
        safeyaml.load("a: !!python/object:os.system x\n", file="f")


def test_safe_json_for_config_files():
    """safeyaml.load_json, for config.json readers: deep nesting, NaN/Infinity, size, syntax: one line each."""
    from perfmodel import safeyaml

    assert safeyaml.load_json('{"hidden_size": 4096}', file="c.json") == {"hidden_size": 4096}
    for text, words in (("[" * 100_000 + "]" * 100_000, "nested too deeply"), ('{"a": NaN}', "NaN"),
                        ('{"a": -Infinity}', "Infinity"), ('{"a": 1', "line 1, column 8"),
                        ('{"a": "' + "x" * 300_000 + '"}', "larger than 256 KiB")):
        with pytest.raises(InputError) as e:
            safeyaml.load_json(text, file="c.json")
        assert str(e.value).startswith("c.json: ") and words in str(e.value) and "\n" not in str(e.value)
