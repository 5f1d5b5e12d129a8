"""``pip install .`` (not ``-e``) ships what a projection reads (issue 19): the package list in pyproject.toml
is complete, the wheel carries the data folders as perfmodel/_data/, and a library that finds no specs says so
instead of printing an empty table."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from perfmodel.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _pyproject_packages() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^packages = \[(.*?)\]", text, re.S | re.M).group(1)
    return set(re.findall(r'"([^"]+)"', block))


def test_every_subpackage_is_listed_in_pyproject():
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "perfmodel").rglob("__init__.py")}
    listed = {p for p in _pyproject_packages() if not p.startswith("perfmodel._data")}
    assert found == listed, ("pyproject.toml [tool.setuptools] packages", found ^ listed)


def test_list_with_no_library_is_an_error(tmp_path, monkeypatch, capsys):
    """Before: an install without its data printed an empty table, exit 0."""
    monkeypatch.setenv("PERFMODEL_ROOT", str(tmp_path))
    for what in ("hardware", "models"):
        assert main(["list", what]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("perfmodel: error:") and "\n" not in err and "found" in err


def test_installed_data_folder_is_found(tmp_path, monkeypatch):
    import perfmodel.paths as paths

    pkg = tmp_path / "site" / "perfmodel"
    (pkg / "_data" / "hardware").mkdir(parents=True)
    monkeypatch.delenv("PERFMODEL_ROOT", raising=False)
    monkeypatch.setattr(paths, "__file__", str(pkg / "paths.py"))
    assert paths.repo_root() == (pkg / "_data").resolve()


@pytest.mark.slow
def test_wheel_ships_the_data(tmp_path):
    """Build the wheel from a copy of the tree (no build/ in the checkout) and look inside."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    # the raw dumps stay out of the copy (the collectives' own rows, collectives.jsonl.gz, ship)
    skip = shutil.ignore_patterns("__pycache__", "*.jsonl", "measurements.jsonl.gz", "validation.json.gz", "*.log",
                                  "validation.json")
    for name in ("perfmodel", "hardware", "workloads", "templates", "calibration"):
        shutil.copytree(ROOT / name, src / name, ignore=skip)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                        str(tmp_path / "whl"), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    (whl,) = (tmp_path / "whl").glob("*.whl")
    names = set(zipfile.ZipFile(whl).namelist())
    for spec in (ROOT / "hardware").glob("*.yaml"):
        assert f"perfmodel/_data/hardware/{spec.name}" in names
    for model in (ROOT / "workloads" / "models").glob("*.yaml"):
        assert f"perfmodel/_data/workloads/models/{model.name}" in names
    for prof in (ROOT / "calibration").glob("*/profile.json"):
        assert f"perfmodel/_data/calibration/{prof.parent.name}/profile.json" in names
    for tpl in (ROOT / "templates").glob("*.j2"):
        assert f"perfmodel/_data/templates/{tpl.name}" in names
    assert "perfmodel/_data/workloads/validation/public_validation.csv" in names
    for whole in (ROOT / "calibration").glob("*/tables.npz"):  # the measured tables projections interpolate
        assert f"perfmodel/_data/calibration/{whole.parent.name}/tables.npz" in names
    for whole in (ROOT / "calibration").glob("*/releases/*/tables.npz"):  # an engine's other releases (--engine-release)
        rel = whole.relative_to(ROOT / "calibration").parent
        assert f"perfmodel/_data/calibration/{rel}/tables.npz" in names
        assert f"perfmodel/_data/calibration/{rel}/profile.json" in names
    for rows in (ROOT / "calibration").glob("**/collectives.jsonl.gz"):  # the collectives' tables (comm_tables)
        assert f"perfmodel/_data/calibration/{rows.relative_to(ROOT / 'calibration')}" in names
    for host in (ROOT / "calibration").glob("*/hf/host.csv"):  # what --engine hf reads
        assert f"perfmodel/_data/calibration/{host.parent.parent.name}/hf/host.csv" in names
        assert f"perfmodel/_data/calibration/{host.parent.parent.name}/hf/kernels.csv" in names
    raw = ("measurements.jsonl.gz", "measurements.jsonl", ".log")
    assert not any(n.endswith(raw) and "_data" in n for n in names)
    # the whole measured tables (tables.npz, ~6 MB) ship so an installed package projects as a checkout does; the
    # raw dumps (~35 MB) stay out
    assert whl.stat().st_size < 10 * 2**20


def _installed_data(dest: Path) -> Path:
    """The data folders as pyproject.toml's package data ships them (perfmodel/_data/ of an installed package)."""
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    for package, folder in data["package-dir"].items():
        for pattern in data["package-data"].get(package, []):
            for f in (ROOT / folder).glob(pattern):
                target = dest / folder / f.relative_to(ROOT / folder)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, target)
    return dest


def test_an_installed_package_projects_as_a_checkout_does(tmp_path):
    """Without the raw measurements (which stay in the checkout), an installed package prices a projection with the
    same measured tables: the whole tables (tables.npz) for the kernels, the collective rows (collectives.jsonl.gz)
    for the all-reduce, an older release's included. Before the collective rows shipped, and while a folder's tables
    were only named where its measurements were present, the installed package priced both by the fits alone."""
    import json
    import os

    data = _installed_data(tmp_path / "_data")
    assert not list((data / "calibration").glob("**/measurements.jsonl*"))

    def tpot(root: Path | None, *args: str) -> tuple[float, float]:
        env = {k: v for k, v in os.environ.items() if k != "PERFMODEL_ROOT"}
        if root is not None:
            env["PERFMODEL_ROOT"] = str(root)
        cmd = [sys.executable, "-m", "perfmodel", "project", "--arch", "b200", "--model", "qwen3.5-397b-a17b",
               "--dtype", "fp8", "--tp", "8", "--batch", "32", "--format", "json", *args]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        doc = json.loads(r.stdout)
        return doc["tpot_ms"], doc["ttft_ms"]

    for args in (("--engine", "sglang", "--engine-release", "0.5.9"), ("--engine", "trtllm")):
        assert tpot(data, *args) == pytest.approx(tpot(None, *args), rel=1e-9), args
