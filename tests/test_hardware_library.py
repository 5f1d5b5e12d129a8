"""The hardware library's newer parts (issue 16) and what-if specs anywhere that extend a library part."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.errors import InputError
from perfmodel.paths import hardware_dir
from perfmodel.spec import (
    BF16_FLOP_PER_CLK_PER_SM,
    SPARSE_GUARD,
    SPEC_FIELDS,
    SUSTAINED_FIELDS,
    bf16_flop_per_clk_per_sm,
    load_spec,
    spec_value,
)

HW = hardware_dir()

# key -> generation
NEW = {"gh200-96gb": "hopper", "gh200-144gb": "hopper", "l40s": "ada", "l4": "ada", "h20": "hopper",
       "h100-pcie": "hopper", "h100-nvl": "hopper", "h200-nvl": "hopper", "rtx-pro-6000": "blackwell-rtx",
       "mi350x": "cdna4"}
# Export-control part: tensor rates capped far below what its SMs and clock give; the guard is an upper bound only.
RATE_CAPPED = {"h20"}


def write(folder: Path, name: str, text: str) -> Path:
    p = folder / name
    p.write_text(textwrap.dedent(text))
    return p


def one_line_error(path, field: str, *words: str) -> str:
    with pytest.raises(InputError) as info:
        load_spec(path)
    msg = str(info.value)
    assert "\n" not in msg and info.value.field == field, msg
    assert msg.startswith(f"{path}: {field}: "), msg
    for w in words:
        assert w.lower() in msg.lower(), (w, msg)
    return msg


# --- the new parts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("key", NEW)
def test_new_part_loads_with_its_generation(key):
    spec = load_spec(key)
    assert spec.key == key and spec.generation == NEW[key]
    assert spec.generation in BF16_FLOP_PER_CLK_PER_SM
    for path, fig in spec.figures.items():
        if path != "memory.visible":  # the loader's derivation says how
            assert fig.ref, (key, path)  # every figure names its source or says how it was guessed


@pytest.mark.parametrize("key", NEW)
def test_new_part_bf16_is_dense(key):
    spec = load_spec(key)
    ratio = bf16_flop_per_clk_per_sm(spec) / BF16_FLOP_PER_CLK_PER_SM[spec.generation]
    assert ratio <= SPARSE_GUARD
    if key in RATE_CAPPED:
        assert ratio < 0.3, ratio
    else:
        assert 0.8 <= ratio <= 1.15, (key, ratio)
    bf16 = spec.tensor_flops["bf16"]
    assert spec.tensor_flops.get("fp8", bf16) <= 2.2 * bf16
    assert spec.tensor_flops.get("fp4", bf16) <= 4.5 * bf16


def test_per_generation_table():
    # AD10x and GB20x: 1024 dense FLOP/clk/SM (L40S 362.05 TF at 142 SMs x 2490 MHz; RTX 5090 419 TF at 170 x 2407)
    assert BF16_FLOP_PER_CLK_PER_SM["ada"] == 1024
    assert BF16_FLOP_PER_CLK_PER_SM["blackwell-rtx"] == 1024
    assert 362.05e12 / (142 * 2490e6) == pytest.approx(1024, rel=1e-3)
    assert 419e12 / (170 * 2407e6) == pytest.approx(1024, rel=2e-3)


@pytest.mark.parametrize("key, sparse", [("l40s", "733 TFLOPS"), ("l4", "242 TFLOPS"),
                                         ("rtx-pro-6000", "1000 TFLOPS"), ("h100-pcie", "1513 TFLOPS"),
                                         ("mi350x", "4600 TFLOPS")])
def test_sparse_figure_filed_as_dense_is_refused(tmp_path, key, sparse):
    p = write(tmp_path, "sparse.yaml", f"""\
        extends: {key}
        name: sparse
        compute:
          tensor:
            bf16: {{value: {sparse}, source: datasheet}}
            fp8: null
            fp4: null
            int8: null
        """)
    one_line_error(p, "compute.tensor.bf16", "sparse")


def test_gh200_figures():
    small, big = load_spec("gh200-96gb"), load_spec("gh200-144gb")
    assert small.hbm_bytes == pytest.approx(96e9) and small.hbm_bandwidth == pytest.approx(4.0e12)
    assert big.hbm_bytes == pytest.approx(144e9) and big.hbm_bandwidth == pytest.approx(4.9e12)
    for s in (small, big):
        assert s.tensor_flops["bf16"] == pytest.approx(989.4e12)  # not 1979, the sparse figure
        assert s.tensor_flops["fp8"] == pytest.approx(1978.9e12)
        assert s.scaleup_bandwidth == pytest.approx(450e9)
        assert s.pcie_bandwidth == pytest.approx(450e9)  # NVLink-C2C 900 GB/s bidirectional, halved
        assert s.figures["power.tdp"].source == "estimate"  # the datasheet's 1000 W is the module's
    assert small.scaleup_domain == 256 and big.scaleup_domain == 2
    assert big.files[1].endswith("gh200-96gb.yaml")


def test_ada_figures():
    l40s, l4 = load_spec("l40s"), load_spec("l4")
    assert l40s.tensor_flops["bf16"] == pytest.approx(362.05e12)  # dense; 733 is the sparse figure
    assert l40s.tensor_flops["fp8"] == pytest.approx(733e12)  # dense; 1466 sparse
    assert l40s.tensor_flops["tf32"] == pytest.approx(183e12)
    assert l40s.vector_fp32_flops == pytest.approx(91.6e12)
    assert (l40s.sm_count, l40s.hbm_bytes, l40s.hbm_bandwidth, l40s.tdp_w) == (142, 48e9, 864e9, 350)
    assert l4.tensor_flops["bf16"] == pytest.approx(121e12)  # 242 sparse, halved
    assert l4.tensor_flops["fp8"] == pytest.approx(242.5e12)
    assert (l4.sm_count, l4.hbm_bytes, l4.hbm_bandwidth, l4.tdp_w) == (58, 24e9, 300e9, 72)
    for s in (l40s, l4):  # no NVLink: scale-up is PCIe Gen4 x16 per direction, 8 GPUs to a server
        assert s.scaleup_bandwidth == pytest.approx(32e9) and s.scaleup_domain == 8
        assert "fp4" not in s.tensor_flops and "fp64" not in s.tensor_flops
        assert s.figures["interconnect.scale_up.latency"].source == "estimate"


def test_hopper_pcie_and_nvl_figures():
    pcie, nvl, h200nvl = load_spec("h100-pcie"), load_spec("h100-nvl"), load_spec("h200-nvl")
    assert pcie.sm_count == 114 and pcie.tensor_flops["bf16"] == pytest.approx(756.5e12)
    assert pcie.hbm_bandwidth == pytest.approx(2e12) and pcie.tdp_w == 350
    assert pcie.scaleup_bandwidth == pytest.approx(64e9) and pcie.scaleup_domain == 8  # modelled as PCIe
    assert nvl.tensor_flops["bf16"] == pytest.approx(835.5e12)  # 1671 sparse
    assert (nvl.hbm_bytes, nvl.hbm_bandwidth, nvl.tdp_w) == (94e9, 3.9e12, 400)
    assert nvl.scaleup_domain == 2 and nvl.scaleup_bandwidth == pytest.approx(300e9)
    assert h200nvl.tensor_flops["bf16"] == pytest.approx(835.5e12)
    assert (h200nvl.hbm_bytes, h200nvl.hbm_bandwidth, h200nvl.tdp_w) == (141e9, 4.8e12, 600)
    assert h200nvl.scaleup_domain == 4 and h200nvl.scaleup_bandwidth == pytest.approx(450e9)
    for s in (pcie, nvl, h200nvl):
        assert not s.sustained  # nobody measured them: nothing inherited from the SXM parts


def test_h20_is_all_estimates():
    h20 = load_spec("h20")
    assert h20.tensor_flops["bf16"] == pytest.approx(148e12) and h20.tensor_flops["fp8"] == pytest.approx(296e12)
    assert h20.hbm_bytes == pytest.approx(96e9) and h20.hbm_bandwidth == pytest.approx(4e12)
    # NVIDIA publishes no H20 datasheet: only the compute capability's shared memory is a printed figure
    assert {p for p, f in h20.figures.items() if f.source == "datasheet"} == {"memory.smem_per_sm"}


def test_rtx_pro_6000_figures():
    rtx = load_spec("rtx-pro-6000")
    assert rtx.generation == "blackwell-rtx"  # not "blackwell": an eighth of a B200 SM's rate per clock
    assert rtx.sm_count == 188 and rtx.hbm_bytes == pytest.approx(96e9)
    assert rtx.hbm_bandwidth == pytest.approx(1597e9) and rtx.tdp_w == 600
    assert rtx.tensor_flops["bf16"] == pytest.approx(500e12)  # 4000 AI TOPS (sparse FP4) / 8
    assert rtx.tensor_flops["fp4"] == pytest.approx(2000e12)
    for d in rtx.tensor_flops:  # NVIDIA prints one sparse FP4 figure: every dense rate is an estimate
        assert rtx.figures[f"compute.tensor.{d}"].source == "estimate", d
    assert rtx.scaleup_bandwidth == pytest.approx(64e9) and rtx.scaleup_domain == 8


def test_mi350x_figures():
    mi350, mi355 = load_spec("mi350x"), load_spec("mi355x")
    assert mi350.tensor_flops["bf16"] == pytest.approx(2.3e15)  # dense; 4.6 PF sparse
    assert mi350.tensor_flops["fp8"] == pytest.approx(4.6e15) and mi350.tensor_flops["fp4"] == pytest.approx(9.2e15)
    assert (mi350.hbm_bytes, mi350.hbm_bandwidth, mi350.tdp_w) == (288e9, 8e12, 1000)
    assert mi350.sm_count == mi355.sm_count == 256
    assert mi350.boost_clock_hz < mi355.boost_clock_hz
    assert mi350.files[1].endswith("mi355x.yaml")


def test_names_still_resolve_as_before():
    # the new files share prefixes with older ones; the older names keep their parts
    assert load_spec("h100").key == "h100-sxm" and load_spec("h200").key == "h200-sxm"
    assert load_spec("l4").key == "l4" and load_spec("h20").key == "h20"
    with pytest.raises(InputError, match="matches several specs: gh200-144gb, gh200-96gb"):
        load_spec("gh200")


def test_device_names_match_their_specs():
    from perfmodel.fit.directory import match_spec

    for device, key in (("NVIDIA H200", "h200-sxm"), ("NVIDIA H200 NVL", "h200-nvl"), ("NVIDIA L40S", "l40s"),
                        ("NVIDIA L4", "l4"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H20", "h20")):
        assert match_spec({"device_name": device}, None).key == key, device


# --- extends: a library part from anywhere ---------------------------------------------------------


WHAT_IF = """\
    extends: {base}
    name: B200 with 10 TB/s
    memory:
      bandwidth: {{value: 10 TB/s, source: estimate, note: what-if}}
    """


@pytest.mark.parametrize("base", ["b200", "b200.yaml", "hgx-b200", "B200"])
def test_user_spec_extends_a_library_part(tmp_path, base):
    p = write(tmp_path, "fast.yaml", WHAT_IF.format(base=base))
    spec, b200 = load_spec(p), load_spec("b200")
    assert spec.name == "B200 with 10 TB/s" and spec.key == "fast"
    assert spec.hbm_bandwidth == pytest.approx(10e12)
    assert spec.figures["memory.bandwidth"].source == "estimate"
    for f in SPEC_FIELDS + SUSTAINED_FIELDS:  # differs only in the one figure and what derives from it
        if f.path == "sustained.bandwidth":  # the measured share of the bandwidth, kept (spec.DERIVED)
            assert spec_value(spec, f.attr) == pytest.approx(spec_value(b200, f.attr) * 10e12 / b200.hbm_bandwidth)
            assert spec.figures[f.path].source == "derived"
        elif f.path != "memory.bandwidth":
            assert spec_value(spec, f.attr) == spec_value(b200, f.attr), f.attr
    assert spec.lineage == ("b200",)  # a what-if of the B200: its calibration applies
    assert spec.generation == b200.generation and spec.vendor == b200.vendor
    assert spec.files == (str(p.resolve()), str((HW / "b200.yaml").resolve()))


def test_own_folder_comes_first(tmp_path):
    local = write(tmp_path, "b200.yaml", (HW / "h100-sxm.yaml").read_text().replace("name: NVIDIA H100 SXM5 80GB",
                                                                                   "name: local base"))
    p = write(tmp_path, "child.yaml", "extends: b200\nname: child\n")
    assert load_spec(p).files[1] == str(local.resolve())
    assert load_spec(p).tensor_flops["bf16"] == pytest.approx(989.4e12)


def test_a_what_if_named_like_its_library_base(tmp_path):
    # a file never extends itself: `extends: b200` in b200.yaml means the library's
    p = write(tmp_path, "b200.yaml", WHAT_IF.format(base="b200"))
    spec = load_spec(p)
    assert spec.files[1] == str((HW / "b200.yaml").resolve()) and spec.hbm_bandwidth == pytest.approx(10e12)


def test_library_chain_through_a_user_file(tmp_path):
    write(tmp_path, "mid.yaml", "extends: gh200-144gb\nname: mid\npower:\n  tdp: {value: 1000 W, source: estimate}\n")
    p = write(tmp_path, "top.yaml", "extends: mid\nname: top\n")
    spec = load_spec(p)
    assert [Path(f).name for f in spec.files] == ["top.yaml", "mid.yaml", "gh200-144gb.yaml", "gh200-96gb.yaml"]
    assert spec.tdp_w == 1000 and spec.hbm_bandwidth == pytest.approx(4.9e12)


def test_missing_target_is_one_line(tmp_path):
    p = write(tmp_path, "child.yaml", "extends: b201\nname: child\n")
    msg = one_line_error(p, "extends", "'b201' not found", str(tmp_path), "spec library", "b200")
    assert "Traceback" not in msg


def test_no_prefix_guessing(tmp_path):
    # `--arch` takes a unique prefix; extends does not, so a what-if's base cannot change as the library grows
    p = write(tmp_path, "child.yaml", "extends: mi35\nname: child\n")
    one_line_error(p, "extends", "not found")


def test_cycle_is_one_line(tmp_path):
    write(tmp_path, "a.yaml", "extends: b\nname: a\n")
    b = write(tmp_path, "b.yaml", "extends: a\nname: b\n")
    with pytest.raises(InputError) as info:
        load_spec(tmp_path / "a.yaml")
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{b.resolve()}: extends: extends loop: a.yaml -> b.yaml -> a.yaml")


@pytest.mark.parametrize("target", ["/etc/passwd", "../../../../../../etc/shadow", "../b200.yaml", "sub/../../x"])
def test_escapes_are_still_refused(tmp_path, target):
    folder = tmp_path / "user"
    folder.mkdir()
    write(tmp_path, "b200.yaml", WHAT_IF.format(base="b200"))  # a file one level up is not reachable either
    p = write(folder, "child.yaml", f"extends: {target}\nname: child\n")
    one_line_error(p, "extends", "outside the spec library")


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks")
def test_a_link_out_of_the_folder_is_refused(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.yaml").write_text("name: secret\n")
    folder = tmp_path / "user"
    folder.mkdir()
    (folder / "b200.yaml").symlink_to(outside / "secret.yaml")
    p = write(folder, "child.yaml", "extends: b200\nname: child\n")
    one_line_error(p, "extends", "outside the spec library")


def test_cache_sees_a_new_local_base(tmp_path):
    p = write(tmp_path, "child.yaml", "extends: b200\nname: child\n")
    assert load_spec(p).files[1] == str((HW / "b200.yaml").resolve())
    local = write(tmp_path, "b200.yaml", WHAT_IF.format(base="h100-sxm"))
    stat = os.stat(tmp_path)
    os.utime(tmp_path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # coarse clocks
    assert load_spec(p).files[1] == str(local.resolve())


# --- the command line --------------------------------------------------------------------------------


def test_list_hardware_shows_the_new_parts(capsys):
    assert main(["list", "hardware"]) == 0
    out = capsys.readouterr().out
    keys = {line.split()[0] for line in out.splitlines()[1:] if line.strip()}
    assert set(NEW) <= keys


def test_project_on_l40s(capsys):
    assert main(["project", "--arch", "l40s", "--model", "llama-3.1-8b"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA L40S" in out and "TTFT" in out and "TPOT" in out


def test_project_with_a_what_if_extending_the_library(tmp_path, capsys):
    p = write(tmp_path, "fast.yaml", WHAT_IF.format(base="hgx-b200"))
    assert main(["project", "--arch", str(p), "--model", "llama-3.1-8b"]) == 0
    assert "B200 with 10 TB/s" in capsys.readouterr().out


def test_cli_missing_extends_target_exits_2(tmp_path, capsys):
    p = write(tmp_path, "child.yaml", "extends: nowhere\nname: child\n")
    capsys.readouterr()
    assert main(["show", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("perfmodel: error:") and "\n" not in err and "Traceback" not in err
    assert f"{p}: extends:" in err and "not found" in err
