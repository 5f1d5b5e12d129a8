"""python -m perfmodel.kernel_check on any measured part's folder: its own fit, or another part's profile carried
there (the transfer rules' backtest on the H100, docs/backtest.md)."""
from __future__ import annotations

from perfmodel.kernel_check import kernel_errors, main
from perfmodel.paths import calibration_dir
from perfmodel.profile import load_profile
from perfmodel.resolve import resolve_profile
from perfmodel.spec import load_spec


def test_the_h100s_kernels_priced_by_its_own_fit_and_by_the_h200s_carried():
    folder = calibration_dir() / "h100-sxm"
    own = kernel_errors(load_profile(folder), folder=folder, arch="h100-sxm")
    carried = kernel_errors(resolve_profile(str(calibration_dir() / "h200"), load_spec("h100-sxm"), "torch"),
                            folder=folder, arch="h100-sxm")
    assert set(own) == set(carried) and {"gemm", "attention decode", "attention prefill", "memory"} <= set(own)
    for cls in ("gemm", "attention decode", "memory"):
        assert own[cls]["n"] == carried[cls]["n"] > 40
        assert own[cls]["median_abs_error"] != carried[cls]["median_abs_error"]  # two different profiles


def test_kernel_check_refuses_a_missing_folder_or_part_in_one_line(capsys):
    assert main(["--folder", "no-such-folder", "--arch", "h100-sxm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no measurements.jsonl" in err and len(err.splitlines()) == 1
    assert main(["--arch", "no-such-part"]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
