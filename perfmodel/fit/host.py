"""The host-cost family: an eager framework's host time per kernel, per step and per request (transformers'
generate(), :mod:`perfmodel.host_costs`), from a calibration folder's ``hf/`` measurements (``host.csv``,
``kernels.csv``, written by :mod:`perfmodel.measure.hf_generate`) into ``Profile.host``.

They describe the machine the calibration ran on, not its GPU: :func:`perfmodel.evidence.compose` carries them to
every part unchanged, and says where they came from.
"""
from __future__ import annotations

from pathlib import Path

from ..host_costs import as_fields, measured_host_costs
from ..profile import Profile

HOST_DIR = "hf"  # the measurement folder's subfolder the hf family writes (perfmodel calibrate --only hf)


def fit_host(prof: Profile, directory: Path) -> tuple[Profile, dict | None]:
    """(the profile with ``host`` fitted, the figures) where ``directory`` holds host measurements, else
    (``prof`` unchanged, None)."""
    folder = Path(directory) / HOST_DIR
    if not (folder / "host.csv").is_file():
        return prof, None
    host = as_fields(measured_host_costs(folder))
    return prof.with_(host=host), host


def report_text(host: dict) -> str:
    return (f"{host['kernel_s'] * 1e6:.1f} us a kernel, {host['step_s'] * 1e6:.0f} us a decode step outside the "
            f"forward ({host['graph_step_s'] * 1e6:.0f} us around a graph replay), "
            f"{host['request_s'] * 1e3:.2f} ms a request\n{host['source']}")
