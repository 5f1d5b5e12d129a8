"""Two tiers of tests (issue 17).

``python -m pytest -q`` runs the default tier: every test not marked ``slow``. ``python -m pytest -q -m slow`` runs
the slow tier alone; CI (``.ci/run``) runs both. Giving any ``-m`` expression replaces the default filter
(``-m "slow or not slow"`` runs everything), and a test named by its node id (``file.py::test``) runs whatever its
tier.

A test is slow when it is marked ``@pytest.mark.slow`` in its file (the workbook recomputations, the browser, the
wheel build, the pinned refit) or when it is listed in ``SLOW`` below: the tests that cost seconds each, marked
here so their files need not change. Keep the list short: a test belongs in it when it takes about 4 s or more on
two shared cores, or 2 s or more to recompute a whole documented output (a faster test holds the code beside it),
and its line says what the time goes on.
"""
from __future__ import annotations

import os

import pytest

# One OpenBLAS thread (set before numpy loads; subprocesses inherit it): on two cores shared with other work its
# second, spinning thread made the least-squares fits of tests/test_tune_fit.py 5-10x slower (50 s -> 9 s for the
# module on 2026-12-03). An explicit setting in the environment wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# One torch (OpenMP) thread, for the same reason (set before torch loads): the tiny-model run of
# tests/test_hf_generate.py took 5 s on idle cores with torch's two threads but 64 s beside other work, and 10.5 s with
# one thread at load 4 (2026-12-05). The CPU runs are functional checks: no assertion reads the thread count.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# "file.py" (the whole module) or "file.py::test_name" (every parametrization of it): seconds measured with
# --durations on the 2-core machine with other work sharing the CPU (2026-12-03), and where they go.
SLOW = {
    # torch on the CPU: the calibration suites measured end to end (benchmarks run for real), and gloo ranks spawned
    "test_calibrate_e2e.py": "17 s: quick suite measured on the CPU, fitted, projected (the module's one test)",
    "test_calibrate_suite.py::test_quick_suite_cpu_end_to_end": "23 s: quick suite measured on the CPU",
    "test_calibrate_suite.py::test_killed_run_resumes_without_loss_or_repeats": "13 s: a suite run killed, resumed",
    "test_calibrate_suite.py::test_collectives_two_gloo_ranks": "9 s: two gloo processes started",
    "test_train_calibrate.py::test_quick_suite_runs_on_cpu": "12 s: training suite measured on the CPU",
    "test_collectives.py::test_gloo_every_collective_at_every_world_size": "11 s: gloo worlds of 2..4 processes",
    "test_collectives.py::test_gloo_overlap_and_tp_layer_rows": "5 s: gloo processes started",
    "test_hf_generate.py::test_tiny_model_on_cpu": "6 s: generate() of a tiny model measured on the CPU, three runs",
    # workbook recomputation by the formulas package (the rest of it is marked in tests/test_workbook.py)
    "test_engines.py::test_workbook_follows_an_overlap_method": "18 s: a whole workbook recomputed for one cell",
    # a real spreadsheet: LibreOffice headless recalculates two MoE workbooks (skipped without soffice)
    "test_workbook_libreoffice.py": "25 s: two workbooks exported and recalculated by LibreOffice",
    # the backtest carries and judges every calibrated family between two parts
    "test_next_generation.py::test_backtest_reports_every_family_and_the_own_profile": "4 s: full backtest",
    # whole documented outputs recomputed (docs/tools/regenerate.py registers the docs/ blocks of this kind slow)
    "test_next_generation.py::test_every_shipped_sustained_block_is_what_perfmodel_sustained_prints":
        "4 s: every part's sustained ceilings measured again off its calibration folder",
    "test_layouts.py::test_docs_speculative_table_is_regenerated": "2-3 s: docs/speculative.md's MTP table",
    "test_tables.py::test_docs_tables_effect_is_regenerated": "2-3 s: docs/tables.md's ten parts, tables on and off",
    # the tiling model's least-squares fits over the measured Triton configurations (2026-12-05, empty cache)
    "test_tune_fit.py::test_held_out_shapes_never_reach_the_fit": "3.6 s: the tiling model fitted twice",
    "test_tune_fit.py::test_fit_recovers_what_ranking_needs": "2.2 s: the tiling model fitted to synthetic timings",
}


def _keys(item) -> tuple[str, str]:
    """The module's file name, and file name :: test name without its parametrization."""
    module = item.path.name
    return module, f"{module}::{getattr(item, 'originalname', None) or item.name}"


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m filter, so that `-m slow` sees these marks
def pytest_collection_modifyitems(config, items):
    found, modules = set(), set()
    for item in items:
        keys = _keys(item)
        modules.add(keys[0])
        if any(k in SLOW for k in keys):
            item.add_marker(pytest.mark.slow)
            found.update(k for k in keys if k in SLOW)
    by_name = any("::" in a for a in config.args)
    # a renamed test would fall silently into the default tier: say so when its whole module was collected
    stale = sorted(k for k in SLOW if "::" in k and k not in found and k.split("::")[0] in modules)
    if stale and not by_name:
        config.issue_config_time_warning(
            pytest.PytestConfigWarning(f"tests/conftest.py SLOW lists tests that were not collected: {stale}"), 2)

    if config.option.markexpr or by_name:
        return  # an explicit -m expression, or tests chosen by name, decide
    keep = [item for item in items if not item.get_closest_marker("slow")]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("slow")])
        items[:] = keep


def load_docs_tool(tool: str):
    """docs/tools/<tool> loaded as a module (the tools are scripts, not a package)."""
    import importlib.util

    from perfmodel.paths import repo_root

    spec = importlib.util.spec_from_file_location(tool.removesuffix(".py"), repo_root() / "docs" / "tools" / tool)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def docs_tool():
    """``tool -> module``: a docs/tools script loaded (:func:`load_docs_tool`)."""
    return load_docs_tool


@pytest.fixture
def generated_block():
    """``(doc, tag, tool, function) -> (the block docs/<doc> holds between <!-- tag: begin/end --> markers, what
    docs/tools/<tool>'s function prints now)``: a documented figure checked against the script that produces it."""
    import re

    from perfmodel.paths import repo_root

    def check(doc: str, tag: str, tool: str, function: str) -> tuple[str, str]:
        root = repo_root()
        module = load_docs_tool(tool)
        text = (root / "docs" / doc).read_text(encoding="utf-8")
        block = re.search(rf"<!-- {tag}: begin -->\n(.*?)\n<!-- {tag}: end -->", text, re.S)
        assert block, f"docs/{doc} has no {tag} block"
        return block.group(1), getattr(module, function)()

    return check


def run_cli(args: list[str], cwd=None):
    """``perfmodel *args`` run in this process, answered as a fresh process answers it: a CompletedProcess of the
    exit code (argparse's exit included), stdout and stderr, with every warning the command raises printed to
    stderr under Python's default filters (pytest would otherwise collect them out of sight). An exception the CLI
    does not turn into one line propagates (a process would print its traceback). About 0.4 s cheaper than a
    process; tests that need a real process (what it imports, how it exits) start one."""
    import contextlib
    import io
    import subprocess
    import warnings

    from perfmodel.cli import main

    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.resetwarnings()
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)  # Python's default filters, -W not given

        def show(message, category, filename, lineno, file=None, line=None):
            err.write(warnings.formatwarning(message, category, filename, lineno, line))

        warnings.showwarning = show
        try:
            if cwd is not None:
                os.chdir(cwd)
            code = main([str(a) for a in args])
        except SystemExit as e:  # as the interpreter exits: None is 0, an int itself, anything else printed, 1
            code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
            if not isinstance(e.code, (int, type(None))):
                print(e.code, file=err)
        finally:
            os.chdir(here)
    return subprocess.CompletedProcess(["perfmodel", *args], code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli():
    """:func:`run_cli`."""
    return run_cli
