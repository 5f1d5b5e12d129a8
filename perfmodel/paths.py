"""Where the data folders (hardware/, workloads/, calibration/, templates/) live.

They sit beside the package in a checkout; an installed package (``pip install .``) carries them as
``perfmodel/_data/`` (pyproject.toml: the specs, models, validation tables, templates and calibration
profiles, not the raw measurements). ``PERFMODEL_ROOT`` overrides, for installs that keep the data elsewhere.
"""
from __future__ import annotations

import os
from pathlib import Path


_RESOLVED: dict[str, Path] = {}  # this module's file -> its resolved folder (resolving it stats every component)


def _package_dir() -> Path:
    hit = _RESOLVED.get(__file__)
    if hit is None:
        hit = _RESOLVED[__file__] = Path(__file__).resolve().parent
    return hit


def repo_root() -> Path:
    env = os.environ.get("PERFMODEL_ROOT")
    if env:
        return Path(env)
    here = _package_dir().parent
    if (here / "hardware").is_dir():
        return here
    installed = _package_dir() / "_data"  # pip install . (not -e): the package data
    if (installed / "hardware").is_dir():
        return installed
    return Path.cwd()


def hardware_dir() -> Path:
    return repo_root() / "hardware"


def workloads_dir() -> Path:
    return repo_root() / "workloads"


def calibration_dir() -> Path:
    return repo_root() / "calibration"


def templates_dir() -> Path:
    return repo_root() / "templates"


# beside an engine folder of imported tables, the tables of the engine's other releases (perfmodel.releases)
RELEASES_DIR = "releases"
# an imported folder's collective rows on their own (perfmodel.cost.comm_tables): its measurements stay in the
# checkout, this file ships in the package so collectives are priced there as in a checkout
COLLECTIVES_FILE = "collectives.jsonl.gz"
