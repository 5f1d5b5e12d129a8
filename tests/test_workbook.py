"""The what-if workbook: its live formulas, recomputed by an engine independent of the writer (the
``formulas`` package), match the Python model before and after an input changes.

Loading a workbook into ``formulas`` takes 2-18 s (it parses every formula), so each case's workbook is
built, saved and loaded once per module (:func:`book`) and every test reads it; an input change is a new
solution of the same loaded model, which leaves the loaded model as it was.
"""
from __future__ import annotations
from perfmodel.resolve import resolve_scenario

import csv
import io
import math

import pytest

openpyxl = pytest.importorskip("openpyxl", reason="openpyxl not installed: pip install openpyxl")

from perfmodel.outputs.workbook import MAX_FORMULA, build_workbook, csv_tables, hoist, set_text  # noqa: E402
from perfmodel.projection import project_resolved  # noqa: E402
from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile  # noqa: E402
from perfmodel.scenario import Scenario  # noqa: E402
from perfmodel.spec import spec_with  # noqa: E402

REL = 1e-3  # 0.1%

CASES = {
    "dense": ("b200", "llama8b", Scenario(batch=8, isl=1024, osl=128)),
    "moe-mla-tp8": ("b200", "deepseek-v3", Scenario(batch="max", tp=8, ep=8, dtype="fp8", isl=2048, osl=256)),
    "moe-tp2": ("h100-sxm", "mixtral", Scenario(batch=16, tp=2, isl=512, osl=64)),
    # transformers' generate(): the host floor per kernel, the per-step host work and the request's setup
    "hf": ("h200", "llama-3.1-8b", Scenario(engine="hf", batch=4, isl=128, osl=16)),
    # a serving engine's own host work a step, synchronous: its measured curve of the step's sequences added to it
    # (no front end, which would set these steps and hide the rest from the inputs' check)
    "vllm-sync": ("h200", "gpt-oss-20b", Scenario(engine="vllm", async_scheduling=False, batch=1024, isl=256, osl=32,
                                                  api_servers=0)),
    # SGLang's memory policy: weights and KV cache within its share, activations outside ('max': the formula of it)
    "sglang-static": ("h200", "llama-3.1-8b", Scenario(engine="sglang", batch="max", isl=1024, osl=128,
                                                       api_servers=0)),
    # the engine's front end setting the step: the longer of the step and its slowest process's curve, a formula
    "vllm-frontend": ("h200", "gpt-oss-20b", Scenario(engine="vllm", batch=1024, isl=256, osl=32)),
    # ... and SGLang's, whose HTTP server grows with the tokens each stream has sent (half the output)
    "sglang-frontend": ("h200", "llama-3.1-8b", Scenario(engine="sglang", batch=512, isl=256, osl=1024)),
    # Gated DeltaNet: the chunked prefill's scan (perfmodel.cost.scan) and the shared expert's gate as formulas
    "deltanet": ("h200", "qwen3-next-80b-a3b", Scenario(batch=4, tp=2, isl=2048, osl=32)),
    # shared experts on a second stream in steps of at most 256 tokens (vLLM 0.12+): the rule a formula of the batch
    "shared-stream": ("h200", "qwen2-57b-a14b", Scenario(engine="vllm", shared_stream="small", batch=64, tp=2,
                                                        isl=512, osl=64)),
}


def _setup(case):
    arch, model, sc = CASES[case]
    hw = resolve_hardware(arch)
    prof = resolve_profile(None, hw)
    return hw, resolve_model(model), sc.validated(), prof


class Recomputed:
    """A workbook loaded into the ``formulas`` engine; cells by sheet and address. ``solve`` gives the
    solution with some input cells changed; the loaded model itself never changes."""

    def __init__(self, path):
        formulas = pytest.importorskip("formulas", reason="formulas not installed: pip install formulas")
        self.book = path.name
        self.model = formulas.ExcelModel().loads(str(path)).finish()
        self.sol = self.model.calculate()

    def key(self, sheet, ref):
        return f"'[{self.book}]{sheet.upper()}'!{ref.replace('$', '')}"

    def get(self, sheet, ref, sol=None):
        v = (self.sol if sol is None else sol)[self.key(sheet, ref)].value[0][0]
        return float(v) if not isinstance(v, (bool, str)) else v

    def solve(self, changes: dict):
        """The solution with ``{(sheet, ref): value}`` set."""
        return self.model.calculate(inputs={self.key(sh, ref): v for (sh, ref), v in changes.items()})


class Book:
    """One case: the built workbook, its saved file loaded into ``formulas``, and the Python projection."""

    def __init__(self, case, folder):
        self.hw, self.model, self.sc, self.prof = _setup(case)
        self.wb = build_workbook(self.hw, self.model, self.sc, self.prof)
        path = folder / f"{case}.xlsx"
        self.wb.save(path)
        self.path = path
        self.proj = project_resolved(self.hw, self.model, resolve_scenario(self.sc, self.hw, None), self.prof)
        self._calc = None

    @property
    def calc(self) -> Recomputed:
        if self._calc is None:
            self._calc = Recomputed(self.path)
        return self._calc


@pytest.fixture(scope="module")
def books(tmp_path_factory):
    folder = tmp_path_factory.mktemp("workbooks")
    cache: dict[str, Book] = {}

    def get(case: str) -> Book:
        if case not in cache:
            cache[case] = Book(case, folder)
        return cache[case]

    return get


def _summary_rows(wb):
    ws = wb["Summary"]
    return {ws[f"F{r}"].value: f"B{r}" for r in range(4, ws.max_row + 1) if ws[f"F{r}"].value}


def _input_row(wb, name):
    ws = wb["Inputs"]
    for r in range(1, ws.max_row + 1):
        if ws[f"A{r}"].value == name and ws[f"B{r}"].value is not None:
            return f"B{r}"
    raise KeyError(name)


def _close(a, b, rel=REL):
    assert math.isclose(float(a), float(b), rel_tol=rel), f"{a} vs {b}"


def _check_against(calc, wb, proj, sol=None):
    rows = _summary_rows(wb)
    get = lambda sheet, ref: calc.get(sheet, ref, sol)  # noqa: E731
    _close(get("Summary", rows["ttft_s"]), proj.ttft_s)
    _close(get("Summary", rows["tpot_s"]), proj.tpot_s)
    _close(get("Summary", rows["e2e_s"]), proj.e2e_s)
    _close(get("Summary", rows["throughput_tok_s"]), proj.throughput_tok_s)
    _close(get("Summary", rows["throughput_tok_s_per_gpu"]), proj.throughput_tok_s_per_gpu)
    _close(get("Summary", rows["mem_total"]), proj.memory.total)
    from perfmodel.energy import projection_energy

    energy = projection_energy(proj)
    _close(get("Summary", rows["joules_per_token"]), energy["joules_per_token"]["output"])
    _close(get("Summary", rows["avg_power_w"]), energy["avg_power_w"])
    # a few per-op times, prefill and the middle decode step (the one Projection.decode holds)
    for sheet, phase in (("Prefill", proj.prefill), ("Decode_mid", proj.decode)):
        if phase is None:
            continue
        ws = wb[sheet]
        header = [c.value for c in ws[8]]
        col = header.index("time_s (one run)") + 1
        by_name = {ws.cell(row=r, column=1).value: r for r in range(9, ws.max_row + 1)}
        for t in sorted(phase.times, key=lambda t: -float(t.total))[:6]:
            r = by_name[t.op.name]
            got = get(sheet, f"{openpyxl.utils.get_column_letter(col)}{r}")
            _close(got, float(t.time))
        _close(get(sheet, "B5"), float(phase.time_s))


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_formulas_match_model_before_and_after_an_input_changes(case, books):
    b = books(case)
    hw, model, sc, prof, wb, calc, proj = b.hw, b.model, b.sc, b.prof, b.wb, b.calc, b.proj
    _check_against(calc, wb, proj)
    if sc.tp > 1:  # collectives appear as operators with live formulas
        kinds = {c.value for c in wb["Decode_mid"]["B"]}
        assert kinds & {"all_reduce", "all_to_all", "all_gather"}
    # the default limit already splits the longest formulas into helper cells: those are checked too
    if case == "dense":
        assert any(c.value == "helper" for ws in wb.worksheets for c in ws[7])

    # change HBM bandwidth on the Inputs sheet: everything follows the model on the changed spec
    new_bw = hw.hbm_bandwidth * 1.37
    sol = calc.solve({("Inputs", _input_row(wb, "hbm_bandwidth")): new_bw})
    proj2 = project_resolved(spec_with(hw, hbm_bandwidth=new_bw), model, resolve_scenario(sc, spec_with(hw, hbm_bandwidth=new_bw), None), prof)
    if case.endswith("-frontend"):  # the front end sets the decode step: the bandwidth moves the prefill alone
        assert proj.decode.account.frontend_s == proj.decode.time_s
        assert math.isclose(proj2.tpot_s, proj.tpot_s) and not math.isclose(proj2.ttft_s, proj.ttft_s, rel_tol=1e-3)
    else:
        assert not math.isclose(proj2.tpot_s, proj.tpot_s, rel_tol=1e-3)
    _check_against(calc, wb, proj2, sol)
    if sc.batch == "max":
        rows = _summary_rows(wb)
        assert calc.get("Summary", rows["n_pre"]) == proj.prefill_requests
        assert calc.get("Inputs", _input_row(wb, "batch")) == proj.batch


@pytest.mark.slow
def test_latency_model_parameter_is_live(books):
    """Profile fields are input cells, generically over the dataclass: change one and the result follows."""
    b = books("dense")
    new = b.prof.gemm_eta["bf16"] * 0.8
    sol = b.calc.solve({("Inputs", _input_row(b.wb, "gemm_eta[bf16]")): new})
    eta = dict(b.prof.gemm_eta, bf16=new)
    _check_against(b.calc, b.wb, project_resolved(b.hw, b.model, resolve_scenario(b.sc, b.hw, None), b.prof.with_(gemm_eta=eta)), sol)


def test_every_formula_is_short_and_inputs_are_labelled(books):
    wb = books("moe-mla-tp8").wb
    n = 0
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for c in row:
                if c.data_type == "f":
                    n += 1
                    assert len(c.value) < MAX_FORMULA, (ws.title, c.coordinate, len(c.value))
    assert n > 200
    ws = wb["Inputs"]
    names = {ws[f"A{r}"].value for r in range(1, ws.max_row + 1)}
    for must in ("hbm_bandwidth", "tensor_flops.fp8", "sm_count", "scaleup_bandwidth", "batch", "isl", "osl",
                 "launch_graph_s"):
        assert must in names
    for fl in ("gemm_eta", "mem_eta", "gemm_k0", "attn_eta", "scaleup_eta"):
        assert any(str(x).startswith(fl) for x in names), fl
    # every input row carries a source
    for r in range(6, ws.max_row + 1):
        if ws[f"B{r}"].value is not None:
            assert ws[f"D{r}"].value, ws[f"A{r}"].value


@pytest.mark.slow
def test_long_formulas_split_into_helper_cells_still_match(tmp_path, monkeypatch):
    """Force deeper splitting (as if a refitted model made every formula pass a lower limit). One output
    token keeps it to the prefill sheet: the splitting is the same code for every sheet."""
    import perfmodel.outputs.workbook as W

    monkeypatch.setattr(W, "MAX_FORMULA", 3000)
    hw, model, _, prof = _setup("dense")
    sc = Scenario(batch=8, isl=1024, osl=1).validated()
    wb = build_workbook(hw, model, sc, prof)
    helpers = [c for ws in wb.worksheets for c in ws[7] if c.value == "helper"]
    assert helpers
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for c in row:
                if c.data_type == "f":
                    assert len(c.value) < 3000
    wb.save(tmp_path / "whatif.xlsx")
    calc = Recomputed(tmp_path / "whatif.xlsx")
    _check_against(calc, wb, project_resolved(hw, model, resolve_scenario(sc, hw, None), prof))


@pytest.mark.parametrize("text", [
    "((A1+MAX(B1,2))*(A1+MAX(B1,2))+(A1+MAX(B1,2)))/(C1*(A1+MAX(B1,2)))", "IF(A1>0,(B1,C1),x_1(D1))+(E1,F1)",
    "Prefill!$B$5*(1+(a,(b)))", "", "(", ")(", "(a))((b)", "é(x,(y))", "SUM(A1:A9)*((1,2),3)",
])
def test_groups_by_arrays_are_the_scan_s(text):
    """The array parse of a formula's groups (balanced text) gives the token scan's list, in its order."""
    from perfmodel.outputs.workbook import _groups, _groups_scan

    assert _groups(text) == _groups_scan(text)


def test_hoist_keeps_meaning():
    """The helper-cell fallback for long formulas: substitution of repeated groups, evaluated."""
    expr = "((A1+MAX(B1,2))*(A1+MAX(B1,2))+(A1+MAX(B1,2)))/(C1*(A1+MAX(B1,2)))"
    refs = iter(f"H{i}" for i in range(1, 50))
    short, helpers = hoist(expr, lambda: next(refs), limit=40)
    assert len(short) < 40 and helpers
    env = {"A1": 3.0, "B1": 5.0, "C1": 2.0}

    def ev(text):
        py = text.replace("MAX", "max")
        for ref, sub in reversed(helpers):
            if ref in py:
                py = py.replace(ref, f"({ev(sub)})")
        for k, v in env.items():
            py = py.replace(k, repr(v))
        return eval(py)  # noqa: S307 - test-only arithmetic

    assert ev(short) == pytest.approx(ev(expr))


@pytest.mark.parametrize("text", ["=1+2", "+SUM(A1:A9)", "-2+3", "@cmd", "=HYPERLINK(\"http://x\")"])
def test_user_text_never_becomes_a_formula(text, tmp_path):
    from openpyxl import Workbook, load_workbook

    wb = Workbook()
    ws = wb.active
    set_text(ws, "A1", text)
    assert ws["A1"].data_type == "s"
    wb.save(tmp_path / "t.xlsx")
    back = load_workbook(tmp_path / "t.xlsx").active["A1"]
    assert back.data_type == "s" and back.value == text


def test_injection_in_spec_name_stays_text(tmp_path):
    """A spec named like a formula comes out as text in the workbook and in the CSV tables."""
    from openpyxl import load_workbook

    from perfmodel.paths import hardware_dir

    spec = tmp_path / "evil.yaml"
    spec.write_text(f"extends: {hardware_dir() / 'h100-sxm.yaml'}\nname: \"=HYPERLINK(\\\"http://evil\\\",\\\"x\\\")\"\n")
    hw = resolve_hardware(str(spec))
    assert hw.name.startswith("=")
    model = resolve_model("llama8b")
    sc = Scenario(batch=1).validated()
    prof = resolve_profile("none", hw)
    wb = build_workbook(hw, model, sc, prof)
    wb.save(tmp_path / "w.xlsx")
    back = load_workbook(tmp_path / "w.xlsx")
    found = 0
    for ws in back.worksheets:
        for row in ws.iter_rows():
            for c in row:
                if isinstance(c.value, str) and "evil" in c.value:
                    found += 1
                    assert c.data_type == "s", (ws.title, c.coordinate)
    assert found
    tables = csv_tables(hw, model, sc, prof)
    rows = list(csv.reader(io.StringIO(tables["summary"])))
    name = rows[1][rows[0].index("name")]
    assert name.startswith("'=")
    for text in tables.values():
        for row in csv.reader(io.StringIO(text)):
            for cell in row:
                assert not cell.startswith(("=", "+", "@")), cell


def test_export_cli_writes_xlsx_and_csv(tmp_path):
    from perfmodel.cli import main

    out = tmp_path / "whatif.xlsx"
    assert main(["export", "--format", "xlsx", "--arch", "b200", "--model", "llama8b", "--batch", "4",
                 "--vary", "batch=1,2,max", "--out", str(out)]) == 0
    wb = openpyxl.load_workbook(out)
    assert {"Inputs", "Summary", "Prefill", "Decode_mid", "Sweep", "About"} <= set(wb.sheetnames)
    sweep = wb["Sweep"]
    assert "not live" in sweep["A1"].value
    assert sweep["A4"].value == "batch_requested"
    assert main(["export", "--format", "csv", "--arch", "b200", "--model", "llama8b", "--out",
                 str(tmp_path / "t")]) == 0
    for suffix in ("ops", "summary", "inputs"):
        assert (tmp_path / f"t-{suffix}.csv").is_file()


@pytest.mark.slow
def test_kv_cache_formula_honours_the_sliding_window(tmp_path):
    """Gemma 3 keeps at most its 1024-token window in five of six layers' KV cache: the workbook's memory rows are
    perfmodel.capacity's own formulas on cells (not batch x bytes per token x (isl + osl)), live in isl and osl,
    and its windowed attention operators are formulas too."""
    from perfmodel import capacity

    hw = resolve_hardware("h200")
    model = resolve_model("gemma-3-27b")
    sc = Scenario(batch=8, isl=4096, osl=256).validated()
    # the fitted model alone: a measured table's ratio is a constant at the exported shapes (docs/tables.md), and
    # this test moves the prompt length
    from perfmodel.cost.tables import without_tables

    prof = without_tables(resolve_profile(None, hw))
    wb = build_workbook(hw, model, sc, prof)
    wb.save(tmp_path / "gemma.xlsx")
    calc = Recomputed(tmp_path / "gemma.xlsx")
    proj = project_resolved(hw, model, resolve_scenario(sc, hw, None), prof)
    rows = _summary_rows(wb)
    per_token = capacity.kv_bytes_per_token(model, proj.scenario)
    kv = calc.get("Summary", rows["mem_kv"])
    _close(kv, proj.memory.kv_cache)
    # 10 full layers keep isl + osl tokens, 52 sliding ones their 1024 (the unwindowed formula: 62 x 4352)
    assert kv == pytest.approx(proj.batch * per_token * (10 * (sc.isl + sc.osl) + 52 * 1024) / 62, rel=1e-9)
    assert kv < 0.4 * proj.batch * per_token * (sc.isl + sc.osl)
    _check_against(calc, wb, proj)
    # a longer prompt grows only the full layers' cache (and the sliding layers' up to their window)
    sol = calc.solve({("Inputs", _input_row(wb, "isl")): 8192})
    longer = project_resolved(hw, model, resolve_scenario(sc.with_(isl=8192), hw, None), prof)
    _close(calc.get("Summary", rows["mem_kv"], sol), longer.memory.kv_cache)
    _close(calc.get("Summary", rows["mem_total"], sol), longer.memory.total)
    _close(calc.get("Summary", rows["ttft_s"], sol), longer.ttft_s)
    _close(calc.get("Summary", rows["tpot_s"], sol), longer.tpot_s)
