"""The one table of per-generation facts (perfmodel/generations.py) and the modules that read it."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from perfmodel import generations
from perfmodel.errors import InputError
from perfmodel.generations import FACT_FIELDS, GENERATIONS, Generation
from perfmodel.spec import BF16_FLOP_PER_CLK_PER_SM, list_specs

ROOT = Path(__file__).resolve().parents[1]


def test_every_generation_a_hardware_spec_names_is_in_the_table():
    specs = list_specs()
    assert len(specs) >= 20
    missing = {s.key: s.generation for s in specs if s.generation not in GENERATIONS}
    assert not missing, missing
    for s in specs:  # and its vendor agrees
        assert GENERATIONS[s.generation].vendor == s.vendor, s.key


def test_generations_the_docs_list_are_in_the_table():
    for path in (ROOT / "hardware" / "README.md", ROOT / "perfmodel" / "spec.py"):
        line = next(ln for ln in path.read_text().splitlines() if re.match(r"\s*generation: hopper\s+#", ln))
        names = [w.strip() for w in line.split("#", 1)[1].split("|")]
        assert all(n in GENERATIONS for n in names if n != "..."), (path, names)


def test_order_is_consistent():
    gens = list(GENERATIONS.values())
    assert [g.order for g in gens] == sorted(g.order for g in gens)  # the table is written in order
    assert len({g.order for g in gens}) == len(gens)  # no two generations tie
    assert all(k == g.name for k, g in GENERATIONS.items())
    # each vendor's release sequence is increasing, and the vendors stand apart
    for line in (("volta", "ampere", "hopper", "blackwell", "blackwell-ultra", "rubin"), ("cdna3", "cdna4")):
        orders = [generations.order(n) for n in line]
        assert orders == sorted(orders) and len(set(orders)) == len(orders), line
    nvidia = [g.order for g in gens if g.vendor == "nvidia"]
    amd = [g.order for g in gens if g.vendor == "amd"]
    assert max(nvidia) < min(amd)
    assert {g.vendor for g in gens} == {"nvidia", "amd"}


def test_every_fact_names_its_source():
    for g in GENERATIONS.values():
        assert set(g.sources) <= set(FACT_FIELDS), (g.name, set(g.sources) - set(FACT_FIELDS))
        for fact in FACT_FIELDS:
            value = getattr(g, fact)
            if value is not None and value != {}:
                assert g.sources.get(fact, "").strip(), (g.name, fact)
        assert all(s.strip() for s in g.sources.values()), g.name


def test_facts_are_well_formed():
    for g in GENERATIONS.values():
        assert g.mma in ("mma.sync", "wgmma", "tcgen05", "mfma"), g.name
        assert (g.mma == "mfma") == (g.vendor == "amd"), g.name
        if g.arch is not None:
            assert re.fullmatch(r"sm_\d+[af]?" if g.vendor == "nvidia" else r"gfx[0-9a-f]+", g.arch), g.name
        if g.process is not None:
            assert len(g.process) == 2, g.name
        for fmt, v in g.flop_per_clk_per_sm.items():
            assert fmt in ("bf16", "fp16", "fp8", "fp4", "int8", "tf32", "fp64") and v > 0, (g.name, fmt)
    # frozen, and its mappings are read-only
    g = GENERATIONS["hopper"]
    with pytest.raises(Exception):
        g.order = 9  # type: ignore[misc]
    with pytest.raises(TypeError):
        g.flop_per_clk_per_sm["bf16"] = 1  # type: ignore[index]
    assert isinstance(g, Generation) and g.async_mma and g.sm_version == 90


def test_process_nodes_are_ones_the_energy_carry_knows():
    from perfmodel.energy.carry import NODE_POWER, process_node

    for g in GENERATIONS.values():
        if g.process is not None:
            assert set(g.process) <= set(NODE_POWER), g.name
    assert process_node("volta") == process_node("hopper") == ("4N", "4N")  # unknown: taken as Hopper's


def test_the_table_holds_the_figures_the_old_tables_did():
    # pinned: moving the seven tables here changed no figure (issue 17: behaviour identical)
    assert {k: g.order for k, g in GENERATIONS.items()} == {
        "volta": 0, "ampere": 1, "ada": 1.5, "blackwell-rtx": 1.75, "hopper": 2, "blackwell": 3,
        "blackwell-ultra": 3.5, "rubin": 4, "cdna3": 10, "cdna4": 11}
    assert {k: g.process for k, g in GENERATIONS.items() if g.process} == {
        "ampere": ("N7", "N7"), "hopper": ("4N", "4N"), "blackwell": ("4NP", "4NP"),
        "blackwell-ultra": ("4NP", "4NP"), "ada": ("4N", "4N"), "blackwell-rtx": ("4N", "4N"),
        "cdna3": ("N5", "N6"), "cdna4": ("N3P", "N6"), "rubin": ("N3", "N3")}
    assert BF16_FLOP_PER_CLK_PER_SM == {"ampere": 2048, "ada": 1024, "hopper": 4096, "blackwell": 8192,
                                        "blackwell-ultra": 8192, "blackwell-rtx": 1024, "cdna3": 2048, "cdna4": 4096}
    assert generations.async_mma_generations() == ("hopper", "blackwell", "blackwell-ultra", "rubin")
    assert generations.with_mma("wgmma") == ("hopper",)
    assert {k: generations.rate_ratio_limits(k) for k in GENERATIONS if generations.rate_ratio_limits(k)} == {
        "blackwell-ultra": {"fp4": 6.75}, "rubin": {"fp4": 6.75}}
    assert generations.l1_smem_bytes("ampere") == 192 * 1024 and generations.l1_smem_bytes("hopper") == 256 * 1024
    sfu = {k: g.sfu_exp_rate for k, g in GENERATIONS.items() if g.sfu_exp_rate is not None}
    assert sfu["blackwell-ultra"] == sfu["rubin"] == 2.0
    assert all(v == 1.0 for k, v in sfu.items() if k not in ("blackwell-ultra", "rubin"))
    assert [k for k in GENERATIONS if generations.sm_version(k) == 90] == ["hopper"]


def test_readers_take_their_facts_from_the_table():
    from perfmodel.attention_kernels import KERNELS
    from perfmodel.transfer import sfu_exp_rate
    from perfmodel.tune.compiled import TABLE_SM
    from perfmodel.tune.resources import ASYNC_MMA_GENERATIONS, MMA_GENERATIONS

    assert ASYNC_MMA_GENERATIONS == generations.async_mma_generations()
    assert set(MMA_GENERATIONS) <= {g.name for g in GENERATIONS.values() if g.vendor == "nvidia"}
    for key in ("trtllm", "mla", "flashinfer"):
        assert KERNELS[key].generations == generations.async_mma_generations()
    assert KERNELS["fa3"].generations == ("hopper",)
    assert generations.sm_version("hopper") == TABLE_SM
    assert sfu_exp_rate("blackwell-ultra") / sfu_exp_rate("hopper") == 2.0
    assert sfu_exp_rate("not-a-generation") == 1.0


def test_accessors():
    assert generations.get("hopper") is GENERATIONS["hopper"] and generations.get("nope") is None
    assert generations.order("nope") is None and generations.process("nope") is None
    assert not generations.has_async_mma("nope") and not generations.has_async_mma("ampere")
    assert generations.has_async_mma("blackwell")
    assert generations.flop_per_clk_per_sm("rubin") is None and generations.flop_per_clk_per_sm("hopper") == 4096
    assert generations.source("hopper", "sfu_exp_rate") == "reference" and generations.source("nope", "order") == ""
    with pytest.raises(InputError, match="unknown generation"):
        generations.require("nope")


def test_generations_is_a_leaf_module():
    tree = ast.parse((ROOT / "perfmodel" / "generations.py").read_text())
    internal = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("perfmodel")):
            internal.add(node.module or "")
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("perfmodel") for a in node.names)
    assert internal <= {"errors", "perfmodel.errors"}, internal
