"""Serving benchmarks from aiconfigurator-core's silicon_sample.csv: the converter, closed-loop concurrency in
the serving simulator, and ``perfmodel validate`` on them (tests/data/aic_silicon_sample.csv: 25 lines cut from
the real file, aggregated and disaggregated, models with and without a descriptor, overloaded rows, and the file's
second records of two measurements, lines 25 and 26)."""
from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from perfmodel.cli import main
from perfmodel.errors import InputError
from perfmodel.graph import Step
from perfmodel.imports import aic_silicon
from perfmodel.paths import repo_root
from perfmodel.projection import evaluate_step
from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile
from perfmodel.scenario import Scenario
from perfmodel.serve.engine import simulate_instance
from perfmodel.resolve import resolve_scenario as for_hardware
from perfmodel.serve.simulate import ServeOptions, build_instance, simulate
from perfmodel.serve.workload import (closed_loop_default_requests, closed_loop_requests, closed_loop_window,
                                      parse_dist, synthetic_requests)

FIXTURE = repo_root() / "tests" / "data" / "aic_silicon_sample.csv"


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> tuple:
    out = tmp_path_factory.mktemp("aic") / "silicon.csv"
    n = aic_silicon.convert_file(FIXTURE, out)
    return out, n, list(csv.DictReader(io.StringIO(out.read_text())))


@pytest.fixture(scope="module")
def validated(converted) -> dict:
    from perfmodel.validate import run_validation

    return {r["id"]: r for r in run_validation(converted[0])}


def _by_line(rows: list[dict]) -> dict:
    src = list(csv.DictReader(io.StringIO(FIXTURE.read_text())))
    return {r["source"].split(":")[1].split(";")[0].split()[0]: r for r in rows if r["metric"] == "ttft"}, src


# --- converter ---------------------------------------------------------------------------------------

SECOND_RECORDS = 2  # the fixture's last two lines record again the measurements of its lines 15 and 16


def test_two_rows_per_measurement_in_the_public_layout(converted):
    out, n, rows = converted
    src = list(csv.DictReader(io.StringIO(FIXTURE.read_text())))[:-SECOND_RECORDS]
    assert n == len(rows) == 2 * len(src)
    public = (repo_root() / "workloads" / "validation" / "public_validation.csv").read_text().splitlines()[0].split(",")
    assert list(rows[0])[:len(public)] == public
    assert list(rows[0]) == list(aic_silicon.COLUMNS)
    for i, s in enumerate(src):
        ttft, tpot = rows[2 * i], rows[2 * i + 1]
        assert (ttft["metric"], tpot["metric"]) == ("ttft", "tpot")
        assert ttft["unit"] == tpot["unit"] == "ms" and ttft["kind"] == "inference"
        assert float(ttft["value"]) == pytest.approx(float(s["silicon_ttft_ms"]), rel=1e-5)
        assert float(tpot["value"]) == pytest.approx(float(s["silicon_tpot_ms"]), rel=1e-5)
        assert ttft["engine"] == s["backend"] and ttft["mode"] == s["mode"]


def test_models_hardware_precision_and_concurrency_are_mapped(converted):
    rows = {r["id"]: r for r in converted[2]}
    r = rows["aic-8-ttft"]  # meta-llama/Llama-3.1-8B-Instruct on h100_sxm, precision blank
    assert (r["model"], r["hardware"], r["hf_model"], r["precision"]) == \
        ("llama-3.1-8b", "h100-sxm", "meta-llama/Llama-3.1-8B-Instruct", "bf16")
    assert "precision blank" in r["notes"] and r["concurrency"] == "8" == r["batch"]
    r = rows["aic-16-ttft"]  # deepseek-ai/DeepSeek-R1
    assert r["model"] == "deepseek-v3" and "DeepSeek-V3 architecture" in r["notes"]
    r = rows["aic-2-ttft"]  # MiniMax: no descriptor, kept with its Hugging Face id
    assert (r["model"], r["hardware"], r["hf_model"]) == ("MiniMaxAI/MiniMax-M2.5", "b300", "")
    r = rows["aic-3-ttft"]  # disaggregated: layout in notes, no aggregated tp
    assert r["mode"] == "disagg" and r["tp"] == "" and r["notes"].startswith("disagg P 1x(tp1") and r["gpus"] == "36"
    r = rows["aic-6-ttft"]  # Qwen3-32B with batch_size 144 but 288 clients
    assert (r["batch"], r["concurrency"]) == ("144", "288")
    r = rows["aic-5-ttft"]  # no silicon_concurrency recorded
    assert r["concurrency"] == "" and "concurrency not recorded" in r["notes"]


def test_a_measurement_recorded_twice_is_one_pair_of_rows_from_the_copy_its_name_confirms(converted):
    rows = {r["id"]: r for r in converted[2]}
    assert not {f"aic-{line}-{m}" for line in (25, 26) for m in ("ttft", "tpot")} & set(rows)
    # line 25 records line 15's run (the same TTFT and TPOT to 17 digits) at tp 64 on the 8-GPU B200 box while its
    # name says tp 8: line 15, which records the 8 GPUs its name states, is kept, and says what line 25 records
    r = rows["aic-15-ttft"]
    assert r["tp"] == "8" and r["gpus"] == "8"
    assert r["source"].startswith("aiconfigurator-core 0.12.0 aic_silicon_sample.csv:15 (also line 25); source_file=")
    assert rows["aic-15-tpot"]["source"] == "aiconfigurator-core 0.12.0 aic_silicon_sample.csv:15 (also line 25)"
    assert "line 25 records tp64 pp1 adp1 moetp8 ep8 b32" in r["notes"]
    # line 26 repeats line 16 under the same layout: the first is kept, and nothing differs to note
    r = rows["aic-16-tpot"]
    assert r["source"].endswith(":16 (also line 26)") and "line 26" not in r["notes"]


def test_copies_are_kept_by_their_name_then_worker_counts_then_file_order():
    head = FIXTURE.read_text().splitlines()[0]
    base = dict.fromkeys(head.split(","), "")
    base.update(backend="sglang", model_path="deepseek-ai/DeepSeek-R1", system="b200_sxm", precision="fp8",
                isl="1024", osl="1024", silicon_ttft_ms="100.5", silicon_tpot_ms="9.25",
                silicon_data_source="silicon_concurrency=4")

    def table(*lines: dict) -> list[dict]:
        text = "\n".join([head] + [",".join(dict(base, **ln)[k] for k in base) for ln in lines]) + "\n"
        return list(csv.DictReader(io.StringIO(aic_silicon.convert_text(text))))

    agg = dict(mode="agg", batch_size="4", pp_size="1", attention_dp_size="1", moe_ep_size="1")
    squared = dict(agg, id="x_c4_tp4_0_ep4_0_1", tp_size="16", moe_tp_size="16")
    plain = dict(agg, id="x_cfg1", tp_size="4", moe_tp_size="4")
    named = dict(agg, id="x_c4_tp4_ep4_2", tp_size="4", moe_tp_size="4")
    assert [r["id"] for r in table(squared, plain, named)] == ["aic-4-ttft", "aic-4-tpot"]
    assert [r["id"] for r in table(squared, plain)] == ["aic-3-ttft", "aic-3-tpot"]
    assert [r["id"] for r in table(plain, dict(plain, id="x_cfg2"))] == ["aic-2-ttft", "aic-2-tpot"]
    side = dict(mode="disagg", prefill_tp_size="8", prefill_pp_size="1", decode_tp_size="8", decode_pp_size="1")
    counted = dict(side, id="y_cfg3", prefill_num_workers="1", decode_num_workers="2")
    kept = table(dict(side, id="y_1"), counted)
    assert [r["id"] for r in kept] == ["aic-3-ttft", "aic-3-tpot"]
    # the layout the validation reads is the kept copy's, not the one its note says the other line records
    assert "line 2 records P ?x(tp8" in kept[0]["notes"]
    assert aic_silicon.disagg_layouts(kept[0]["notes"])["D"]["workers"] == 2
    # a different measured value, or the same values on another part, is another run
    assert len(table(plain, dict(plain, silicon_tpot_ms="9.26"))) == 4
    assert len(table(plain, dict(plain, system="h200_sxm"))) == 4


def test_a_nightly_named_without_its_date_takes_its_images_dated_tag():
    """The file names some nightly builds ``nightly-dev`` and records the container image in the data source; the
    image's tag dates the build (perfmodel.engines.nightly_release reads it). Anything else stays as written."""
    head = FIXTURE.read_text().splitlines()[0]
    base = dict.fromkeys(head.split(","), "")
    base.update(backend="sglang", model_path="zhipuai/GLM-5", system="b200_sxm", precision="fp8", isl="1024",
                osl="1024", silicon_ttft_ms="100.5", silicon_tpot_ms="9.25", mode="agg", batch_size="4",
                tp_size="8", pp_size="1", attention_dp_size="1", moe_tp_size="8", moe_ep_size="1", id="z_cfg1")

    def version(backend_version: str, source: str) -> str:
        line = dict(base, backend_version=backend_version, silicon_data_source=source)
        text = "\n".join([head, ",".join(line[k] for k in base)]) + "\n"
        return next(csv.DictReader(io.StringIO(aic_silicon.convert_text(text))))["engine_version"]

    image = "silicon_concurrency=4; image=lmsysorg/sglang:nightly-dev-cu13-20260317-1eea7448"
    assert version("nightly-dev", image) == "nightly-dev-cu13-20260317-1eea7448"
    assert version("nightly-dev", image + "; wip=True") == "nightly-dev-cu13-20260317-1eea7448"
    assert version("nightly-dev-20260216-d3bae71e", image) == "nightly-dev-20260216-d3bae71e"  # dated already
    assert version("0.5.9", "image=lmsysorg/sglang:v0.5.9-cu130") == "0.5.9"
    assert version("nightly-dev", "silicon_concurrency=4") == "nightly-dev"  # no image: as written
    assert version("nightly-dev", "image=vllm/vllm-openai:nightly-5b8c30d6") == "nightly-dev"  # a tag with no date


def test_source_names_the_package_and_never_a_local_path(converted):
    text = converted[0].read_text()
    assert "/Users/" not in text and "harrli" not in text
    rows = {r["id"]: r for r in converted[2]}
    s = rows["aic-8-ttft"]["source"]
    assert s.startswith("aiconfigurator-core 0.12.0 aic_silicon_sample.csv:8; source_file=meta-llama_Llama-3.1-8B")
    assert rows["aic-8-tpot"]["source"] == "aiconfigurator-core 0.12.0 aic_silicon_sample.csv:8"
    assert "nvcr.io/nvidia/" in rows["aic-3-ttft"]["source"]  # container images are not local paths
    assert aic_silicon.sanitize_source("source_file=/home/me/x/y.csv; image=nvcr.io/a/b:1") == \
        "source_file=y.csv; image=nvcr.io/a/b:1"


def test_conversion_is_deterministic_and_cells_are_escaped(converted, tmp_path):
    out2 = tmp_path / "again.csv"
    aic_silicon.convert_file(FIXTURE, out2)
    assert out2.read_bytes() == converted[0].read_bytes()
    src = FIXTURE.read_text().splitlines()
    hostile = src[0] + "\n" + src[1].replace("MiniMaxAI/MiniMax-M2.5", "=HYPERLINK(1)", 1) + "\n"
    table = aic_silicon.convert_text(hostile)
    assert ",'=HYPERLINK(1)," in table and ",=HYPERLINK" not in table


@pytest.mark.parametrize("edit, field", [("silicon_ttft_ms", "silicon_ttft_ms"), ("isl", "isl"), ("mode", "mode")])
def test_bad_input_is_one_line(tmp_path, capsys, edit, field):
    rows = list(csv.DictReader(io.StringIO(FIXTURE.read_text())))[:2]
    rows[1][edit] = "nan" if edit != "mode" else "sideways"
    p = tmp_path / "bad.csv"
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    p.write_text(buf.getvalue())
    rc = aic_silicon.main([str(p), str(tmp_path / "out.csv")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and field in err[0] and "bad.csv:3" in err[0]
    assert not (tmp_path / "out.csv").exists()
    p.write_text("a,b\n1,2\n")
    assert aic_silicon.main([str(p), str(tmp_path / "out.csv")]) == 2
    assert aic_silicon.main([str(tmp_path / "missing.csv"), str(tmp_path / "out.csv")]) == 2


# --- closed-loop concurrency -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def h200_8b():
    hw = resolve_hardware("h200")
    return hw, resolve_model("llama8b"), resolve_profile(None, hw)


def _closed(c, n=None, isl="1024", osl="128"):
    n = n or closed_loop_default_requests(c)
    return closed_loop_requests(n, c, parse_dist(isl, field="isl"), parse_dist(osl, field="osl"))


def test_at_concurrency_one_ttft_is_a_lone_prefill(h200_8b):
    hw, model, prof = h200_8b
    sc = for_hardware(Scenario(batch="max"), hw, None).validated()
    out = simulate(hw, model, sc, prof, _closed(1))
    lone = evaluate_step(model, hw, sc, prof, Step("prefill", 1, 1024, 0)).time_s * 1e3
    # the next request arrives as the previous one finishes into an idle engine: its prefill alone
    assert out["ttft_ms"]["mean"] == pytest.approx(lone, rel=0.002)
    assert out["ttft_ms"]["p99"] == pytest.approx(out["ttft_ms"]["p50"], rel=1e-9)
    assert out["closed_loop"]["peak_in_flight"] == 1 and out["preemptions"] == 0


def test_tpot_grows_with_concurrency_for_a_memory_bound_decode(h200_8b):
    hw, model, prof = h200_8b
    sc = for_hardware(Scenario(batch="max"), hw, None).validated()
    tpot = [simulate(hw, model, sc, prof, _closed(c))["tpot_ms"]["mean"] for c in (1, 4, 16, 64)]
    assert all(b >= a for a, b in zip(tpot, tpot[1:])), tpot
    assert tpot[-1] > 1.5 * tpot[0]


@pytest.mark.parametrize("c", [1, 3, 16])
def test_never_more_than_c_in_flight(h200_8b, c):
    hw, model, prof = h200_8b
    sc = for_hardware(Scenario(batch="max"), hw, None).validated()
    reqs = _closed(c, n=120, osl="uniform:20:200")
    inst = build_instance(hw, model, sc, prof, reqs, "mixed", ServeOptions(), None)
    r = simulate_instance(inst.steps, inst.cfg, reqs)
    assert r.peak_in_system == c
    # from the times alone: +1 at each arrival, -1 at each finish (a finish first at equal times)
    events = sorted([(t, 1) for t in r.arrival] + [(t, -1) for t in r.finish])
    in_flight = np.cumsum([d for _, d in events])
    assert in_flight.max() == c and in_flight[-1] == 0
    # each request after the first c is sent the instant an earlier one finishes
    assert np.all(r.arrival[:c] == 0.0)
    assert np.all(np.isin(r.arrival[c:], r.finish))
    assert np.all(r.first_token > r.arrival) and np.all(r.finish >= r.first_token)


def test_a_spread_start_cuts_only_the_first_waves_outputs():
    isl, osl = parse_dist("1024", field="isl"), parse_dist("128", field="osl")
    burst = closed_loop_requests(50, 8, isl, osl)
    spread = closed_loop_requests(50, 8, isl, osl, start="spread")
    assert np.all(burst.osl == 128)
    assert spread.osl[:8].tolist() == [16, 32, 48, 64, 80, 96, 112, 128]  # k / C of the length, k = 1 .. C
    assert np.all(spread.osl[8:] == 128) and np.array_equal(spread.isl, burst.isl)
    # more clients than output tokens: rounded up, never below one token
    few = closed_loop_requests(20, 8, isl, parse_dist("3", field="osl"), start="spread")
    assert few.osl[:8].tolist() == [1, 1, 2, 2, 2, 3, 3, 3]
    with pytest.raises(InputError, match="closed-loop start"):
        closed_loop_requests(20, 8, isl, osl, start="jitter")


def test_a_spread_start_desynchronizes_the_measured_requests(h200_8b):
    hw, model, prof = h200_8b
    sc = for_hardware(Scenario(batch="max"), hw, None).validated()
    c = 8
    n = closed_loop_default_requests(c)
    lo, hi = closed_loop_window(n, c)
    got = {}
    for start in ("burst", "spread"):
        reqs = closed_loop_requests(n, c, parse_dist("1024", field="isl"), parse_dist("128", field="osl"),
                                    start=start)
        inst = build_instance(hw, model, sc, prof, reqs, "mixed", ServeOptions(), None)
        arrivals = simulate_instance(inst.steps, inst.cfg, reqs).arrival[lo:hi]
        out = simulate(hw, model, sc, prof, reqs)
        got[start] = (np.unique(arrivals).size, out["ttft_ms"]["mean"], out["tpot_ms"]["mean"])
    # lock-step waves: the measured requests arrive c at a time; spread: each at its own instant
    assert got["burst"][0] <= (hi - lo) // c + 1 and got["spread"][0] == hi - lo
    # a prompt arriving alone waits for one step, not for its wave's prompts ...
    assert got["spread"][1] < 0.5 * got["burst"][1]
    # ... and every other request's prompt now runs while a request decodes (in a wave, only those after its own)
    assert got["spread"][2] > got["burst"][2]


def test_closed_loop_window_and_metrics(h200_8b):
    assert closed_loop_window(closed_loop_default_requests(8), 8) == (16, 216)
    assert closed_loop_window(5, 8) == (0, 5)
    assert closed_loop_default_requests(200) == 1000
    hw, model, prof = h200_8b
    sc = for_hardware(Scenario(batch="max"), hw, None).validated()
    out = simulate(hw, model, sc, prof, _closed(8), ServeOptions(replicas=2))
    cl = out["closed_loop"]
    assert cl["measured_requests"] == out["requests"] == 200 and cl["warmup_requests"] == 16
    # Little's law with the client holding 8 in the system
    assert out["request_throughput_req_s"] == pytest.approx(8 / (out["e2e_ms"]["mean"] / 1e3), rel=1e-9)


def test_closed_loop_refusals(h200_8b):
    hw, model, prof = h200_8b
    sc = for_hardware(Scenario(batch="max"), hw, None).validated()
    assert simulate(hw, model, sc, prof, _closed(4), ServeOptions(disagg=(1, 1)))["closed_loop"]["concurrency"] == 4
    with pytest.raises(InputError, match="concurrency"):
        closed_loop_requests(10, 0, parse_dist("8", field="isl"), parse_dist("8", field="osl"))
    # open-loop runs are unchanged by the new field
    reqs = synthetic_requests(50, 5.0, parse_dist("512", field="isl"), parse_dist("64", field="osl"))
    assert reqs.concurrency is None and "closed_loop" not in simulate(hw, model, sc, prof, reqs)


def test_serve_cli_concurrency(capsys):
    rc = main(["serve", "--arch", "h200", "--model", "llama8b", "--concurrency", "4", "--osl", "64", "--format",
               "json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["workload"]["arrival"] == "closed-loop" and doc["closed_loop"]["concurrency"] == 4
    rc = main(["serve", "--arch", "h200", "--model", "llama8b", "--concurrency", "4", "--osl", "64"])
    assert rc == 0 and "closed loop at concurrency 4" in capsys.readouterr().out
    rc = main(["serve", "--arch", "h200", "--model", "llama8b", "--concurrency", "4", "--osl", "64",
               "--closed-loop-start", "spread"])
    assert rc == 0 and "closed loop at concurrency 4 from a spread start" in capsys.readouterr().out
    for bad in (["--concurrency", "0"], ["--concurrency", "4", "--rate", "2"], ["--concurrency", "x"],
                ["--rate", "2", "--closed-loop-start", "spread"]):
        rc = main(["serve", "--arch", "h200", "--model", "llama8b", *bad])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1


# --- perfmodel validate ------------------------------------------------------------------------------

EXPECTED = {  # fixture line -> reason
    "2": "projected", "3": "projected", "4": "batch differs from concurrency",
    "5": "concurrency not recorded", "6": "batch differs from concurrency", "7": "projected",
    "8": "projected", "9": "projected", "10": "projected", "11": "projected", "12": "projection refused",
    "13": "projected", "14": "disaggregated layout not recorded", "15": "projected", "16": "projected",
    "17": "projected", "18": "projection refused", "19": "projected", "20": "projected", "21": "projected",
    "22": "projected", "23": "projected", "24": "layout recorded squared"}


def test_validate_projects_supported_rows_and_states_why_not_for_the_rest(validated):
    assert len(validated) == 46
    for line, reason in EXPECTED.items():
        for metric in ("ttft", "tpot"):
            r = validated[f"aic-{line}-{metric}"]
            assert r["reason"] == reason, (line, r["status"])
            if reason == "projected":
                assert r["predicted"] > 0 and np.isfinite(r["error"]) and r["status"] == "ok"
                assert r["engine"] in ("trtllm", "vllm", "sglang") and r["concurrency"] >= 1
            else:
                assert r["predicted"] is None and r["error"] is None and r["status"]
    # expert-parallel MoE layouts are projected (TP 8 with EP 8 over the same GPUs); line 4's per-rank batch of
    # 56 under 224 clients says attention data parallel the row does not record
    assert validated["aic-15-ttft"]["predicted"] > 0
    assert "does not divide" in validated["aic-18-tpot"]["status"]


def test_overloaded_rows_queue(validated):
    # Llama-3.1-70B fp8 on one H200, 8192 in / 1024 out at 64 clients: the KV cache holds far fewer, so the
    # measured TTFT is tens of seconds (29.7 s TensorRT-LLM, 39.8 s vLLM); the simulation must queue too
    for line in ("22", "23"):
        r = validated[f"aic-{line}-ttft"]
        assert r["published"] > 20_000 and r["predicted"] > 10_000, r


def test_summary_and_outputs(validated, converted, capsys):
    from perfmodel.validate import summary, validation_csv, validation_table

    rows = list(validated.values())
    s = summary(rows)["serving"]
    assert s["coverage"]["projected"] == 32 and sum(s["coverage"].values()) == 46
    assert "h200-sxm vllm ttft" in s["by_part_engine"] and "deepseek-ai/DeepSeek-R1 tpot" in s["by_model"]
    # every projected row in one layout class: one scheduler, attention-DP ranks or disaggregated workers
    assert sum(v["n"] for v in s["by_layout"].values()) == s["coverage"]["projected"]
    assert set(k.rsplit(" ", 1)[0] for k in s["by_layout"]) <= {"tp", "attention-dp", "disaggregated"}
    # and in one architecture class: the descriptor's MoE layers or none (DeepSeek-R1 and gpt-oss against Llama)
    assert sum(v["n"] for v in s["by_architecture"].values()) == s["coverage"]["projected"]
    assert {k.rsplit(" ", 1)[0] for k in s["by_architecture"]} == {"moe", "dense"}
    assert validated["aic-15-tpot"]["architecture"] == "moe" and validated["aic-8-tpot"]["architecture"] == "dense"
    text = validation_table(rows, summary_only=True)
    assert "by part, engine and metric" in text and "by architecture and metric" in text and "aic-8-ttft" not in text
    table = list(csv.DictReader(io.StringIO(validation_csv(rows))))
    assert table[0]["reason"] and "checkpoint" in table[0] and "architecture" in table[0]
    rc = main(["validate", "--csv", str(converted[0]), "--where", "hardware=h100-sxm,engine=trtllm", "--summary"])
    out = capsys.readouterr().out
    assert rc == 0 and "h100-sxm trtllm tpot" in out and "n=2 " in out and "b200" not in out
    rc = main(["validate", "--csv", str(converted[0]), "--limit", "3", "--format", "json"])
    assert rc == 0 and len(json.loads(capsys.readouterr().out)) == 3
    for bad in (["--where", "nosuchcolumn=1"], ["--where", "hardware"], ["--limit", "0"]):
        rc = main(["validate", "--csv", str(converted[0]), *bad])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1, err


def test_public_table_is_unchanged_by_the_serving_path():
    from perfmodel.validate import run_validation, summary

    rows = run_validation(where="hardware=h200-sxm", limit=4)
    assert [r["id"] for r in rows] == ["trt09-l2-70b-h200-tp1-128-128", "trt09-l2-70b-h200-tp2-128-2048",
                                       "trt09-l2-70b-h200-tp1-2048-128", "trt09-l2-70b-h200-tp1-2048-2048"]
    assert all("reason" not in r for r in rows) and "serving" not in summary(rows)


def test_doc_states_todays_mtp_diagnosis_of_the_b200_deepseek_rows():
    """docs/validation-silicon.md's paragraph on DeepSeek-R1 fp8 TP 8 under TensorRT-LLM on B200 prints the three
    projections it names (without MTP, with one and three draft tokens) as the model gives them today."""
    from perfmodel.paths import repo_root
    from perfmodel.projection import project

    doc = (repo_root() / "docs" / "validation-silicon.md").read_text()
    para = " ".join(doc.split("- **DeepSeek-R1 on B200 under TensorRT-LLM, fp8, TP 8**")[1].split("\n- **")[0].split())
    kw = dict(dtype="fp8", tp=8, batch=4, isl=1024, osl=8192, engine="trtllm")
    plain = project("b200", "deepseek-v3", **kw).tpot_s * 1e3
    one = project("b200", "deepseek-v3", mtp=1, mtp_accept=0.85, **kw).tpot_s * 1e3
    three = project("b200", "deepseek-v3", mtp=3, mtp_accept=(0.85, 0.75, 0.65), **kw).tpot_s * 1e3
    assert f"gives {plain:.2f} ms" in para and f"0.85` {one:.2f} ms" in para and f"0.65` {three:.2f} ms" in para


def test_doc_states_todays_deepep_diagnosis_of_the_gb200_wide_ep_rows():
    """docs/validation-silicon.md's paragraph on DeepSeek-V3 under SGLang on GB200 at thousands of clients prints
    the decode step it names, with the preset's all-to-all (DeepEP) and with a gather, as the model gives them today."""
    from perfmodel.paths import repo_root
    from perfmodel.projection import project

    doc = (repo_root() / "docs" / "validation-silicon.md").read_text()
    para = " ".join(doc.split("- **DeepSeek-V3 on GB200 under SGLang at thousands of clients**")[1]
                    .split("\n- **")[0].split())
    kw = dict(dtype="fp4", tp=1, attention_dp=32, ep=32, engine="sglang", batch=8192, isl=1024, osl=1024,
              batching="static", api_servers=0)
    a2a = project("gb200", "deepseek-v3", **kw).tpot_s * 1e3  # the preset's, for wide EP
    gather = project("gb200", "deepseek-v3", moe_exchange="gather", **kw).tpot_s * 1e3
    assert f"gives {a2a:.2f} ms (DeepEP's low-latency kernels, docs/collectives.md), with `--moe-exchange gather` " \
        f"{gather:.2f} ms" in para


def test_validation_takes_the_closed_loop_start():
    from perfmodel.validate import run_validation

    path = repo_root() / "workloads" / "validation" / "aiconfigurator_silicon.csv"
    where = "hardware=h200-sxm,engine=vllm,model=llama-3.1-70b,concurrency=16"
    burst = {r["id"]: r for r in run_validation(path, where=where, limit=2)}
    spread = {r["id"]: r for r in run_validation(path, where=where, limit=2, closed_loop_start="spread")}
    ttft = [i for i in burst if burst[i]["metric"] == "ttft"]
    assert ttft and all(spread[i]["predicted"] < burst[i]["predicted"] for i in ttft)


def test_doc_states_how_often_the_committed_table_found_a_run_recorded_twice():
    """docs/validation-silicon.md's "One run, one pair of rows" prints the committed table's counts: its
    measurements, the runs kept with other copies, those copies, and what the copies record otherwise."""
    import re

    path = repo_root() / "workloads" / "validation" / "aiconfigurator_silicon.csv"
    ttft = [r for r in csv.DictReader(io.StringIO(path.read_text())) if r["metric"] == "ttft"]
    also = [re.search(r"\(also lines? ([\d, ]+)\)", r["source"]) for r in ttft]
    copies = sum(len(m.group(1).split(", ")) for m in also if m)

    def noting(pattern: str) -> int:
        return sum(1 for r in ttft if re.search(pattern, r["notes"]))

    doc = " ".join((repo_root() / "docs" / "validation-silicon.md").read_text().split())
    para = doc.split("**One run, one pair of rows**")[1].split("## ")[0]
    assert f"holds {len(ttft):,} end-to-end serving measurements" in doc
    assert f"# 0.4 s; {2 * len(ttft):,} rows" in doc
    assert f"records {sum(1 for m in also if m):,} of its runs on more than one line: {copies:,} lines" in para
    layouts, names, releases = (noting(p) for p in (r"line \d+ records (tp|P )", r"line \d+ names ",
                                                     r"line \d+ records release "))
    assert f"{layouts:,} runs' copies record another layout" in para
    assert f"{names:,} another checkpoint name" in para
    assert (f"{releases:,} another release string" if releases else "no copy another release string") in para


def test_doc_states_the_attention_dp_and_wider_layout_diagnoses():
    """docs/validation-silicon.md's bullets on vLLM's attention-DP MiniMax-M2.5 runs and SGLang's wider Qwen3.5
    layouts print the measured table's values and today's projections."""
    import statistics

    from perfmodel.paths import repo_root
    from perfmodel.projection import project

    path = repo_root() / "workloads" / "validation" / "aiconfigurator_silicon.csv"
    rows = [r for r in csv.DictReader(io.StringIO(path.read_text())) if r["metric"] == "tpot"]
    doc = " ".join((repo_root() / "docs" / "validation-silicon.md").read_text().split())

    def tpot(model, part, release, **cells):
        return statistics.median(float(r["value"]) for r in rows if r["model"] == model and r["hardware"] == part
                                 and r["engine_version"] == release and r["isl"] == r["osl"] == "1024"
                                 and all(r[k] == v for k, v in cells.items()))

    mm = "MiniMaxAI/MiniMax-M2.5"
    ratios = {c: tpot(mm, "b200", "0.19.0", precision="fp8", tp="2", attention_dp="2", moe_ep="4", concurrency=c)
              / tpot(mm, "b200", "0.19.0", precision="fp8", tp="2", attention_dp="1", moe_ep="1", concurrency=c)
              for c in ("4", "8", "16", "32", "64", "128", "256", "512")}
    assert f"within {max(v for c, v in ratios.items() if c != '512'):.3f}x of the same model" in doc
    assert f"at 512 clients {ratios['512']:.3f}x" in doc
    q = "Qwen/Qwen3.5-397B-A17B"
    measured = [tpot(q, "b200", "0.5.9", concurrency="4", tp=tp, moe_ep=ep) for tp, ep in (("4", "1"), ("8", "1"),
                                                                                           ("4", "4"))]
    assert (f"TP 4 measures {measured[0]:.2f} ms, TP 8 {measured[1]:.2f} ms and TP 4 with EP 4 {measured[2]:.2f} "
            "ms") in doc
    kw = dict(engine="sglang", engine_release="0.5.9", dtype="fp8", batch=4, isl=1024, osl=1024)
    projected = [project("b200", "qwen3.5-397b-a17b", tp=tp, ep=ep, **kw).tpot_s * 1e3 for tp, ep in ((4, 1), (8, 1),
                                                                                                      (4, 4))]
    assert "a step of 4 sequences projects {:.2f}, {:.2f} and {:.2f} ms".format(*projected) in doc
    gap = measured[1] - measured[0]
    assert f"TP 8 step {gap:.1f} ms ({gap / 60 * 1e3:.0f} us a layer) slower" in doc
