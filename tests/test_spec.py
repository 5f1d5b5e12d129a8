"""Tests for the hardware-spec loader and the shipped hardware library."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml

from perfmodel.errors import InputError
from perfmodel.paths import hardware_dir
from perfmodel.spec import (
    BF16_FLOP_PER_CLK_PER_SM,
    SOURCES,
    SPEC_FIELDS,
    HardwareSpec,
    bf16_flop_per_clk_per_sm,
    list_specs,
    load_spec,
    spec_value,
    spec_with,
)

FIXTURES = Path(__file__).parent / "data" / "specs"
HW = hardware_dir()
SHIPPED = sorted(p.name for p in HW.glob("*.yaml"))
EXPECTED = {"a100-sxm-80gb.yaml", "h100-sxm.yaml", "h200-sxm.yaml", "b200.yaml", "gb200.yaml", "b300.yaml",
            "gb300.yaml", "mi300x.yaml", "mi325x.yaml", "mi355x.yaml", "blackwell.yaml", "rubin-estimate.yaml"}

# Figures the reference datasheet table marks U (unverified / conflicting), per shipped file, as the
# effective (merged) field paths. None of them may be labelled datasheet.
U_FIELDS = {
    "b200": ["compute.boost_clock", "compute.tensor.fp64"],
    "blackwell": ["compute.boost_clock", "compute.tensor.fp64"],
    "gb200": ["compute.sm_count", "compute.boost_clock", "memory.l2", "memory.smem_per_sm"],
    "b300": ["compute.sm_count", "compute.boost_clock", "memory.l2", "memory.smem_per_sm", "interconnect.pcie",
             "power.tdp"],
    "gb300": ["compute.sm_count", "compute.boost_clock", "compute.tensor.fp64", "compute.tensor.tf32",
              "compute.tensor.bf16", "memory.l2", "memory.smem_per_sm"],
    "mi300x": ["memory.smem_per_sm", "interconnect.scale_up.bandwidth"],
    "mi325x": ["compute.boost_clock", "compute.tensor.fp64", "compute.tensor.tf32", "compute.tensor.bf16",
               "compute.tensor.fp8", "compute.vector_fp32", "memory.bandwidth", "memory.l2", "memory.smem_per_sm",
               "interconnect.scale_up.bandwidth", "interconnect.scale_up.domain", "power.tdp"],
    "mi355x": ["compute.boost_clock", "compute.tensor.fp64", "compute.tensor.tf32", "compute.vector_fp32",
               "memory.l2", "memory.smem_per_sm", "interconnect.scale_up.bandwidth", "interconnect.pcie"],
}

H100_TEXT = (HW / "h100-sxm.yaml").read_text()


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def h100_variant(tmp_path: Path, old: str, new: str, name: str = "bad.yaml") -> Path:
    assert old in H100_TEXT, old
    return write(tmp_path, name, H100_TEXT.replace(old, new, 1))


def expect_error(path: Path, field: str, *words: str, file: Path | None = None) -> InputError:
    """Loading ``path`` fails with one line "FILE: FIELD: ..." (FILE is ``file``, default ``path``)."""
    with pytest.raises(InputError) as info:
        load_spec(path)
    err = info.value
    msg = str(err)
    assert "\n" not in msg, msg
    assert msg.startswith(f"{file or path}: {field}: "), msg
    assert err.field == field, msg
    for w in words:
        assert w.lower() in msg.lower(), msg
    return err


# --- the shipped library ---------------------------------------------------------------------------


def test_expected_files_shipped():
    assert EXPECTED <= set(SHIPPED)


@pytest.mark.parametrize("fname", SHIPPED)
def test_every_shipped_spec_loads(fname):
    spec = load_spec(HW / fname)
    assert isinstance(spec, HardwareSpec)
    assert spec.key == Path(fname).stem
    assert spec.vendor in ("nvidia", "amd", "other")
    assert "bf16" in spec.tensor_flops
    assert len(spec.sha256) == 64
    assert spec.files[0] == str((HW / fname).resolve())
    for f in SPEC_FIELDS:
        v = spec_value(spec, f.attr)
        if v is not None:
            assert v > 0, f.attr
            assert spec.figures[f.path].value == pytest.approx(v)


def test_list_specs_sorted_and_complete():
    specs = list_specs()
    keys = [s.key for s in specs]
    assert keys == sorted(keys)
    assert set(keys) == {Path(f).stem for f in SHIPPED}


@pytest.mark.parametrize("name,key", [("h200", "h200-sxm"), ("h200-sxm", "h200-sxm"), ("h200-sxm.yaml", "h200-sxm"),
                                      ("blackwell.yaml", "blackwell"), ("b200", "b200"), ("a100", "a100-sxm-80gb"),
                                      ("h100", "h100-sxm"), ("gb200-nvl72", "gb200"), ("mi300", "mi300x"),
                                      ("rubin", "rubin-estimate"), ("H100", "h100-sxm")])
def test_name_resolution(name, key):
    assert load_spec(name).key == key


def test_full_path_resolves():
    assert load_spec(str((HW / "h200-sxm.yaml").resolve())).key == "h200-sxm"
    assert load_spec(HW / "mi300x.yaml").key == "mi300x"


def test_unknown_name_suggests_matches():
    with pytest.raises(InputError) as info:
        load_spec("h201")
    msg = str(info.value)
    assert "\n" not in msg
    assert "h200" in msg and "h201" in msg


def test_blackwell_is_b200():
    bw, b200 = load_spec("blackwell"), load_spec("b200")
    assert bw.name == "NVIDIA Blackwell (B200)"
    assert bw.tensor_flops == b200.tensor_flops
    assert bw.hbm_bandwidth == b200.hbm_bandwidth
    assert bw.files[1].endswith("b200.yaml")


def test_h100_dense_figures():
    h100 = load_spec("h100")
    assert h100.tensor_flops["bf16"] == pytest.approx(989.4e12)
    assert h100.tensor_flops["bf16"] != pytest.approx(1979e12)
    assert h100.tensor_flops["fp8"] == pytest.approx(1978.9e12)
    assert h100.hbm_bandwidth == pytest.approx(3.35e12)
    assert h100.hbm_bandwidth != pytest.approx(3.07e12)
    assert h100.scaleup_bandwidth == pytest.approx(450e9)  # per direction
    assert h100.figures["interconnect.scale_up.bandwidth"].source == "derived"


def test_a100_is_the_108_sm_product():
    a100 = load_spec("a100")
    assert a100.sm_count == 108
    assert a100.l2_bytes == 40 * 2**20
    assert not a100.has_native("fp8")
    assert a100.tensor_rate("fp8") == a100.tensor_flops["bf16"]


def test_h200_extends_h100():
    h200, h100 = load_spec("h200"), load_spec("h100")
    assert h200.hbm_bytes == pytest.approx(141e9)
    assert h200.hbm_bandwidth == pytest.approx(4.8e12)
    assert h200.tensor_flops == h100.tensor_flops
    assert h200.sm_count == 132
    assert h200.figures["compute.tensor.bf16"].file.endswith("h100-sxm.yaml")
    assert h200.figures["memory.bandwidth"].file.endswith("h200-sxm.yaml")
    assert len(h200.files) == 2
    assert h200.sha256 != h100.sha256


def test_nvl72_parts():
    # nominal capacity from the datasheet; what a process sees from the MLPerf system descriptions
    for key, gb, mib in (("gb200", 192, 189471), ("gb300", 288, 284208)):
        s = load_spec(key)
        assert s.scaleup_domain == 72
        assert s.hbm_bytes == pytest.approx(gb * 1e9)
        assert s.hbm_visible_bytes == mib * 2**20
    for key in ("a100", "h100", "h200", "b200", "b300", "mi300x", "mi325x", "mi355x"):
        assert load_spec(key).scaleup_domain == 8


def test_scaleup_is_half_the_bidirectional_figure():
    for key, bidir in (("a100", 600e9), ("h100", 900e9), ("h200", 900e9), ("b200", 1800e9), ("gb200", 1800e9),
                       ("b300", 1800e9), ("gb300", 1800e9)):
        assert load_spec(key).scaleup_bandwidth == pytest.approx(bidir / 2), key


RATE_CAPPED = {"h20"}


@pytest.mark.parametrize("fname", SHIPPED)
def test_bf16_per_sm_per_clock_is_dense(fname):
    spec = load_spec(HW / fname)
    table = BF16_FLOP_PER_CLK_PER_SM.get(spec.generation)
    if table is None:
        assert spec.generation == "rubin"  # the hypothetical part; every other generation is known
        return
    ratio = bf16_flop_per_clk_per_sm(spec) / table
    if spec.key in RATE_CAPPED:  # an export part: its tensor rate capped far below what its SMs do per clock
        assert ratio <= 1.15, (spec.key, ratio)
        return
    assert 0.8 <= ratio <= 1.15, (spec.key, ratio)
    if "fp8" in spec.tensor_flops:
        assert spec.tensor_flops["fp8"] <= 2.2 * spec.tensor_flops["bf16"]


def test_sparse_bf16_filed_as_dense_rejected():
    expect_error(FIXTURES / "h100-sparse-bf16.yaml", "compute.tensor.bf16", "sparse")


def test_sparse_fp8_beside_dense_bf16_rejected():
    expect_error(FIXTURES / "h100-sparse-fp8.yaml", "compute.tensor.fp8", "sparse")


def test_fp4_ratio_guard(tmp_path):
    p = h100_variant(tmp_path, "    int8:", "    fp4:  {value: 7916 TFLOPS, source: datasheet}\n    int8:")
    expect_error(p, "compute.tensor.fp4", "sparse")


# --- provenance -----------------------------------------------------------------------------------


def _raw_figures(node, prefix=""):
    for k, v in (node or {}).items():
        if isinstance(v, dict) and "value" in v:
            yield prefix + k, v
        elif isinstance(v, dict):
            yield from _raw_figures(v, prefix + k + ".")


@pytest.mark.parametrize("fname", SHIPPED)
def test_every_figure_has_a_known_source(fname):
    doc = yaml.safe_load((HW / fname).read_text())
    for path, fig in _raw_figures(doc):
        assert fig["source"] in SOURCES, (fname, path)
        if fig["source"] in ("estimate", "derived"):
            assert fig.get("note") or fig.get("ref"), f"{fname}: {path}: an {fig['source']} needs a note or ref"
    for path, fig in load_spec(HW / fname).figures.items():
        assert fig.source in SOURCES, (fname, path)


@pytest.mark.parametrize("key", sorted(U_FIELDS))
def test_unverified_figures_are_not_datasheet(key):
    spec = load_spec(key)
    for path in U_FIELDS[key]:
        assert path in spec.figures, (key, path)
        assert spec.figures[path].source != "datasheet", (key, path)


def test_next_gen_part_is_all_estimate():
    spec = load_spec("rubin-estimate")
    assert "estimate" in spec.name.lower() or "hypothetical" in spec.name.lower()
    doc = yaml.safe_load((HW / "rubin-estimate.yaml").read_text())
    figs = list(_raw_figures(doc))
    assert len(figs) >= 18
    for path, fig in figs:
        assert fig["source"] == "estimate" and fig.get("note"), path


# --- bad input, one test per class ----------------------------------------------------------------


def test_yaml_syntax_error_names_line():
    p = FIXTURES / "bad-syntax.yaml"
    with pytest.raises(InputError) as info:
        load_spec(p)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"{p}: line ")
    assert re.search(r"line \d+", msg) and "YAML syntax" in msg


def test_top_level_not_a_mapping():
    expect_error(FIXTURES / "not-a-mapping.yaml", "(top level)", "mapping")


def test_unknown_key_suggests_closest(tmp_path):
    p = h100_variant(tmp_path, "  bandwidth:   {value: 3.35", "  bandwith:   {value: 3.35")
    expect_error(p, "memory.bandwith", "unknown key", "'bandwidth'")


def test_unknown_top_level_key(tmp_path):
    p = h100_variant(tmp_path, "vendor: nvidia", "vendor: nvidia\ngeneraton: hopper")
    expect_error(p, "generaton", "unknown key", "'generation'")


def test_unknown_key_in_figure(tmp_path):
    p = h100_variant(tmp_path, "power:\n  tdp: {value: 700 W, source: datasheet", "power:\n  tdp: {value: 700 W, sauce: x, source: datasheet")
    expect_error(p, "power.tdp.sauce", "unknown key", "'source'")


def test_missing_required_figure(tmp_path):
    text = re.sub(r"  l2: .*\n", "", H100_TEXT)
    p = write(tmp_path, "bad.yaml", text)
    expect_error(p, "memory.l2", "missing required")


def test_missing_bf16(tmp_path):
    text = re.sub(r"    bf16: .*\n", "", H100_TEXT)
    p = write(tmp_path, "bad.yaml", text)
    expect_error(p, "compute.tensor.bf16", "missing required")


def test_missing_required_name(tmp_path):
    p = h100_variant(tmp_path, "name: NVIDIA H100 SXM5 80GB\n", "")
    expect_error(p, "name", "missing required")


def test_missing_source(tmp_path):
    p = h100_variant(tmp_path, "tdp: {value: 700 W, source: datasheet,", "tdp: {value: 700 W,")
    expect_error(p, "power.tdp.source", "missing")


def test_wrong_unit(tmp_path):
    p = h100_variant(tmp_path, "{value: 3.35 TB/s,", "{value: 4.8 TB,")
    expect_error(p, "memory.bandwidth.value", "not a bandwidth", "TB")


def test_value_not_a_number(tmp_path):
    p = h100_variant(tmp_path, "{value: 700 W,", "{value: lots W,")
    expect_error(p, "power.tdp.value", "expected")


def test_zero_value(tmp_path):
    p = h100_variant(tmp_path, "{value: 3.35 TB/s,", "{value: 0 TB/s,")
    expect_error(p, "memory.bandwidth.value", "positive")


def test_negative_value(tmp_path):
    p = h100_variant(tmp_path, "{value: 700 W,", "{value: -700 W,")
    expect_error(p, "power.tdp.value", "positive")


def test_bad_source(tmp_path):
    p = h100_variant(tmp_path, "{value: 700 W, source: datasheet", "{value: 700 W, source: datashet")
    expect_error(p, "power.tdp.source", "not one of", "'datasheet'")


def test_figure_not_a_mapping(tmp_path):
    p = h100_variant(tmp_path, "  tdp: {value: 700 W, source: datasheet, ref: \"NVIDIA H100 SXM datasheet\"}", "  tdp: 700 W")
    expect_error(p, "power.tdp", "figure mapping")


def test_sm_count_not_integer(tmp_path):
    p = h100_variant(tmp_path, "{value: 132,", "{value: 132.5,")
    expect_error(p, "compute.sm_count.value", "whole number")


def test_domain_not_integer(tmp_path):
    p = h100_variant(tmp_path, "domain:    {value: 8,", "domain:    {value: 7.5,")
    expect_error(p, "interconnect.scale_up.domain.value", "whole number")


def test_bad_vendor(tmp_path):
    p = h100_variant(tmp_path, "vendor: nvidia", "vendor: nvidiaa")
    expect_error(p, "vendor", "not one of")


def test_extends_loop_named():
    # named at the file whose extends: closes the loop
    expect_error(FIXTURES / "loop-a.yaml", "extends", "loop", "loop-a.yaml -> loop-b.yaml -> loop-a.yaml",
                 file=FIXTURES / "loop-b.yaml")


def test_extends_loop_in_tmp(tmp_path):
    write(tmp_path, "a.yaml", "extends: b.yaml\nname: a\n")
    write(tmp_path, "b.yaml", "extends: a.yaml\nname: b\n")
    expect_error(tmp_path / "a.yaml", "extends", "a.yaml -> b.yaml -> a.yaml", file=tmp_path / "b.yaml")


def test_extends_target_missing(tmp_path):
    p = write(tmp_path, "child.yaml", "extends: nowhere.yaml\nname: child\n")
    expect_error(p, "extends", "not found", "nowhere.yaml")


def test_str_of_error_is_one_line_for_cli():
    for bad in (FIXTURES / "bad-syntax.yaml", FIXTURES / "loop-a.yaml", FIXTURES / "h100-sparse-bf16.yaml",
                FIXTURES / "not-a-mapping.yaml", "no-such-gpu"):
        with pytest.raises(InputError) as info:
            load_spec(bad)
        assert "\n" not in str(info.value)
        assert str(info.value).count(": ") >= 2


# --- extends and what-ifs -------------------------------------------------------------------------


def test_five_line_what_if_extends(tmp_path):
    base_copy = tmp_path / "h100-sxm.yaml"
    base_copy.write_text(H100_TEXT)
    p = write(tmp_path, "h100-fast.yaml", """\
        extends: h100-sxm.yaml
        name: H100 with 4.8 TB/s
        memory:
          bandwidth: {value: 4.8 TB/s, source: estimate}
        """)
    spec, base = load_spec(p), load_spec(HW / "h100-sxm.yaml")
    assert spec.name == "H100 with 4.8 TB/s"
    assert spec.key == "h100-fast"
    assert spec.hbm_bandwidth == pytest.approx(4.8e12)
    assert spec.figures["memory.bandwidth"].source == "estimate"
    assert spec.figures["memory.bandwidth"].file == str(p.resolve())
    for f in SPEC_FIELDS:
        if f.path != "memory.bandwidth":
            assert spec_value(spec, f.attr) == spec_value(base, f.attr), f.attr
            if f.path in spec.figures:
                assert spec.figures[f.path].source == base.figures[f.path].source
    assert spec.vendor == "nvidia" and spec.generation == "hopper"
    assert spec.files == (str(p.resolve()), str(base_copy.resolve()))


def test_extends_across_directories(tmp_path):
    p = write(tmp_path, "w.yaml", f"extends: {HW / 'h100-sxm.yaml'}\nname: w\nmemory:\n  capacity: {{value: 96 GB, source: estimate}}\n")
    assert load_spec(p).hbm_bytes == pytest.approx(96e9)


def test_extends_null_drops_optional_figure(tmp_path):
    p = write(tmp_path, "nofp8.yaml", f"extends: {HW / 'h100-sxm.yaml'}\nname: no fp8\ncompute:\n  tensor:\n    fp8: null\n")
    spec = load_spec(p)
    assert "fp8" not in spec.tensor_flops and "compute.tensor.fp8" not in spec.figures


def test_aliases_not_inherited():
    # h200 extends h100 but must not answer to "h100"
    assert load_spec("h100").key == "h100-sxm"


def test_cache_sees_edits(tmp_path):
    p = write(tmp_path, "h.yaml", H100_TEXT)
    a = load_spec(p)
    assert load_spec(p) == a
    import os
    p.write_text(H100_TEXT.replace("{value: 700 W,", "{value: 650 W,"))
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert load_spec(p).tdp_w == 650


def test_cached_specs_not_shared_mutably():
    a = load_spec("h100")
    a.tensor_flops["bf16"] = 1.0
    assert load_spec("h100").tensor_flops["bf16"] == pytest.approx(989.4e12)


def test_spec_with():
    base = load_spec("h100")
    w = spec_with(base, hbm_bandwidth=6e12, tensor_flops={"bf16": 1.2e15}, scaleup_domain=16)
    assert w.hbm_bandwidth == 6e12 and w.scaleup_domain == 16
    assert w.tensor_flops["bf16"] == 1.2e15 and w.tensor_flops["fp8"] == base.tensor_flops["fp8"]
    for path in ("memory.bandwidth", "compute.tensor.bf16", "interconnect.scale_up.domain"):
        assert w.figures[path].source == "estimate" and w.figures[path].ref == "what-if override"
    assert w.figures["memory.capacity"] == base.figures["memory.capacity"]
    assert w.sha256 != base.sha256
    assert base.hbm_bandwidth == pytest.approx(3.35e12)  # the original is untouched
    assert spec_with(base, hbm_bandwidth="4.8 TB/s").hbm_bandwidth == pytest.approx(4.8e12)
    with pytest.raises(InputError) as info:
        spec_with(base, hbm_bandwith=1e12)
    assert "hbm_bandwidth" in str(info.value)
    with pytest.raises(InputError):
        spec_with(base, hbm_bandwidth=-1)


def test_spec_fields_table():
    attrs = [f.attr for f in SPEC_FIELDS]
    assert len(set(attrs)) == len(attrs)
    for attr, path, dim, label in SPEC_FIELDS:
        assert path.split(".")[0] in ("compute", "memory", "interconnect", "power") and label
    spec = load_spec("h100")
    assert spec_value(spec, "hbm_bandwidth") == spec.hbm_bandwidth
    assert spec_value(spec, "tensor_flops.bf16") == spec.tensor_flops["bf16"]
    assert spec_value(spec, "tensor_flops.fp4") is None


def test_repeated_loads_come_from_the_cache(monkeypatch):
    """A loaded spec is parsed once: later loads of an unchanged file reuse it (speed: benchmarks/bench_outputs.py)."""
    import perfmodel.spec as S

    load_spec("h200")
    calls = []
    real = S._build
    monkeypatch.setattr(S, "_build", lambda path: calls.append(path) or real(path))
    specs = [load_spec("h200") for _ in range(1000)]
    assert calls == [] and all(s == specs[0] for s in specs)
    S.clear_cache()
    load_spec("h200")
    assert len(calls) == 1
