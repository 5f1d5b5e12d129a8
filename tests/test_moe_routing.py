"""The router's skew as the engines' measured MoE tables time it (issue 25): a class per routing distribution,
the model's own by default (aiconfigurator-core's per family), replaced by --moe-routing."""
from __future__ import annotations

import pytest

from perfmodel.cli import main
from perfmodel.routing import ROUTINGS, default_routing
from perfmodel.projection import project
from perfmodel.resolve import resolve_model

KW = dict(tp=8, ep=8, dtype="fp4", batch=64, isl=1024, osl=256, engine="trtllm")



@pytest.mark.parametrize("model, routing", [("deepseek-v3", "power_law_1.01"), ("kimi-k2", "power_law_1.01"),
                                            ("llama-4-maverick", "power_law_1.01"), ("qwen3-235b-a22b", "power_law_1.2"),
                                            ("gpt-oss-120b", "power_law_1.2"), ("mixtral-8x7b", "power_law_1.2")])
def test_each_family_has_its_routing(model, routing):
    assert default_routing(resolve_model(model).family) == routing


def test_every_routing_is_a_class_of_the_tables_and_moves_the_projection():
    """B200 TensorRT-LLM's tables time all three; the table-priced module differs between them, and no routing
    given is the model's."""
    tpot = {r: project("b200", "deepseek-v3", moe_routing=r, **KW).tpot_s for r in ROUTINGS}
    assert len({round(t, 9) for t in tpot.values()}) == 3
    assert project("b200", "deepseek-v3", **KW).tpot_s == pytest.approx(tpot["power_law_1.01"], rel=1e-12)


def test_a_part_without_tables_is_not_moved_by_the_routing():
    """PyTorch's MoE on the H200: no engine table prices the module and its MoE evidence (the H200's own fit)
    timed no skew, so the fitted model's uniform routing stands whatever the routing."""
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


# --- the skew carried to parts without tables (perfmodel.fit.skew, perfmodel.cost.tables.skew_ratio) -----------

def _classes(ratio_of_tokens, n_shapes=6):
    """A balanced and a power_law_1.2 class of one kernel: n_shapes shapes at each of tokens 4, 64, 4096 and EP 1
    and 8, the skewed one ``ratio_of_tokens(tokens, ep)`` times the balanced."""
    import numpy as np

    from perfmodel.cost.table_store import ClassRows

    dims = np.array([[t, 4096 + 128 * i, 1024, 8, 128, ep] for t in (4, 64, 4096) for ep in (1, 8)
                     for i in range(n_shapes)], dtype=float)
    base = np.linspace(1e-4, 2e-4, len(dims))
    skewed = base * np.array([ratio_of_tokens(d[0], d[5]) for d in dims])
    return [ClassRows(("moe", "fp8", "balanced"), "k", {}, dims, base),
            ClassRows(("moe", "fp8", "power_law_1.2"), "k", {}, dims, skewed),
            ClassRows(("moe", "fp8", "power_law_1.01"), "other kernel", {}, dims, skewed)]


def test_the_skew_is_the_tables_median_ratio_per_routing_ep_and_tokens():
    from perfmodel.fit.skew import fit_skew

    skew = fit_skew(_classes(lambda t, ep: 0.9 if t < 100 else (1.4 if ep > 1 else 1.1)))
    assert skew == {"power_law_1.2:ep:4": 0.9, "power_law_1.2:ep:64": 0.9, "power_law_1.2:ep:4096": 1.4,
                    "power_law_1.2:local:4": 0.9, "power_law_1.2:local:64": 0.9, "power_law_1.2:local:4096": 1.1}
    assert fit_skew(_classes(lambda t, ep: 1.2, n_shapes=4)) == {}  # fewer shapes a bin than it takes


def test_the_skew_prices_a_module_between_and_beyond_its_points():
    import numpy as np

    from perfmodel import ops as O
    from perfmodel.cost.tables import skew_ratio
    from perfmodel.profile import DEFAULTS

    prof = DEFAULTS.with_(gemm_grouped_skew={"power_law_1.2:ep:64": 0.9, "power_law_1.2:ep:4096": 1.5})

    def op(tokens, routing="power_law_1.2", ep=8):
        return O.Op("moe.gate_up", "gemm", "decode", 1.0, 1.0, {"moe_tokens": tokens, "moe_ep": ep,
                                                                 "moe_routing": routing})

    assert skew_ratio(op(512), prof) == pytest.approx(1.2)  # halfway in log tokens
    assert skew_ratio(op(1), prof) == pytest.approx(0.9) and skew_ratio(op(1e6), prof) == pytest.approx(1.5)
    assert np.allclose(skew_ratio(op(np.array([64.0, 4096.0])), prof), [0.9, 1.5])
    assert skew_ratio(op(512, "balanced"), prof) is None
    assert skew_ratio(op(512, ep=1), prof) is None  # no figure without EP
    assert skew_ratio(op(512), DEFAULTS) is None


def test_a_part_without_tables_of_its_own_carries_the_skew():
    """rubin-estimate has no MoE table: its MoE family is carried from an engine folder whose tables timed the
    skew, so the router's skew moves the projection there too (before: only parts with their own tables)."""
    kw = dict(tp=8, ep=8, dtype="fp4", batch=256, isl=2048, osl=256, engine="trtllm")
    skewed = project("rubin-estimate", "deepseek-v3", **kw)
    balanced = project("rubin-estimate", "deepseek-v3", moe_routing="balanced", **kw)
    assert skewed.profile.gemm_grouped_skew and not skewed.profile.gemm_grouped_table
    assert skewed.ttft_s != pytest.approx(balanced.ttft_s, rel=1e-3)
