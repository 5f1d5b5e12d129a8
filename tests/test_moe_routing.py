"""The router's skew as the engines' measured MoE tables time it (issue 25): a class per routing distribution,
the model's own by default (aiconfigurator-core's per family), replaced by --moe-routing."""
from __future__ import annotations

import pytest

from perfmodel.cli import main
from perfmodel.models import ROUTINGS, default_routing
from perfmodel.projection import project
from perfmodel.resolve import resolve_model

KW = dict(tp=8, ep=8, dtype="fp4", batch=64, isl=1024, osl=256, engine="trtllm")



@pytest.mark.parametrize("model, routing", [("deepseek-v3", "power_law_1.01"), ("kimi-k2", "power_law_1.01"),
                                            ("llama-4-maverick", "power_law_1.01"), ("qwen3-235b-a22b", "power_law_1.2"),
                                            ("gpt-oss-120b", "power_law_1.2"), ("mixtral-8x7b", "power_law_1.2")])
def test_each_family_has_its_routing(model, routing):
    assert default_routing(resolve_model(model)) == routing


def test_every_routing_is_a_class_of_the_tables_and_moves_the_projection():
    """B200 TensorRT-LLM's tables time all three; the table-priced module differs between them, and no routing
    given is the model's."""
    tpot = {r: project("b200", "deepseek-v3", moe_routing=r, **KW).tpot_s for r in ROUTINGS}
    assert len({round(t, 9) for t in tpot.values()}) == 3
    assert project("b200", "deepseek-v3", **KW).tpot_s == pytest.approx(tpot["power_law_1.01"], rel=1e-12)


def test_a_part_without_tables_is_not_moved_by_the_routing():
    """The fitted model assumes uniform routing: only a measured table holds a skew (the assumptions say so)."""
    kw = dict(KW, engine="torch", dtype="fp8")
    a = project("h200-sxm", "deepseek-v3", moe_routing="balanced", **kw)
    b = project("h200-sxm", "deepseek-v3", moe_routing="power_law_1.2", **kw)
    assert a.tpot_s == pytest.approx(b.tpot_s, rel=1e-12)


def test_the_assumptions_name_the_routing():
    p = project("b200", "qwen3-30b-a3b", tp=1, dtype="fp8", batch=32, engine="trtllm")
    text = "; ".join(p.assumptions)
    assert "power_law_1.2 routing class" in text and "the model's" in text


def test_an_unknown_routing_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["project", "--arch", "b200", "--model", "deepseek-v3", "--moe-routing", "zipf"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--moe-routing" in err and "Traceback" not in err
