"""Accept what transformers accepts (issue 26): every family the config.json importer claims, built with
transformers' own config classes (no weights, CPU only) with their library defaults and with the real models'
parameters (tests/data/hf_configs, normalised by transformers as save_pretrained would write them), is imported
and projected. The refusals that remain are deliberate and listed here and in docs/models.md."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from perfmodel import project  # noqa: E402
from perfmodel.errors import InputError  # noqa: E402
from perfmodel.models import _HF_FAMILIES, _HF_WRAPPERS, model_from_hf_config  # noqa: E402

HF = Path(__file__).parent / "data" / "hf_configs"
logging.getLogger("transformers").setLevel(logging.ERROR)

# model_type -> why its transformers default config is refused (deliberately: not a runnable model)
DEFAULT_REFUSED = {
    "deepseek_v2": "num_experts_per_tok defaults to None: the library's default config routes to no expert",
}
# real configs refused after transformers' normalisation, and why
REAL_REFUSED = {
    "google--gemma-4-26B-A4B_config.json": "gemma4: per-layer-type head widths and K = V attention not modelled",
    "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16_config.json": (
        "transformers fills time_step_limit with [0.0, inf]; config.json files are read as strict JSON (no Infinity)"),
}


def _mapping():
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return CONFIG_MAPPING


def _claimed() -> list[str]:
    return sorted(set(_HF_FAMILIES) | set(_HF_WRAPPERS))


def _architecture(mt: str) -> str:
    return (_HF_FAMILIES[mt][1] if mt in _HF_FAMILIES else _HF_WRAPPERS[mt][0])[0]


def _project(tmp_path: Path, name: str, cfg: dict):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    model = model_from_hf_config(path)
    for tp in (1, 2, 4, 8, 16):  # the fewest H200s it fits on
        try:
            p = project("h200-sxm", model, tp=tp, batch=1, isl=512, osl=16)
        except InputError as e:
            if "would fit" in str(e):
                continue
            raise
        assert p.ttft_s > 0 and p.tpot_s > 0
        return model
    raise AssertionError(f"{name} fits on no TP up to 16")


@pytest.mark.parametrize("mt", _claimed())
def test_transformers_default_config_of_every_claimed_family(tmp_path, mt):
    if mt not in _mapping():
        pytest.skip(f"{mt} is not a transformers model_type (published with its own code: trust_remote_code)")
    cfg = _mapping()[mt]().to_dict()
    cfg["architectures"] = [_architecture(mt)]
    if mt in DEFAULT_REFUSED:
        with pytest.raises(InputError):
            _project(tmp_path, mt, cfg)
        return
    _project(tmp_path, mt, cfg)


@pytest.mark.parametrize("file", sorted(p.name for p in HF.glob("*_config.json")))
def test_real_configs_as_transformers_writes_them(tmp_path, file):
    raw = json.loads((HF / file).read_text())
    if raw.get("model_type") not in _mapping():
        pytest.skip(f"{raw.get('model_type')} is not a transformers model_type")
    cfg = transformers.AutoConfig.for_model(**raw).to_dict()
    if file in REAL_REFUSED:
        with pytest.raises((InputError, ValueError)):
            _project(tmp_path, file.removesuffix(".json"), cfg)
        return
    model = _project(tmp_path, file.removesuffix(".json"), cfg)
    original = model_from_hf_config(HF / file)  # the published file and transformers' rewrite are one model
    shape = ("hidden", "layers", "heads", "kv_heads", "head_dim", "intermediate", "moe", "mla", "vocab")
    assert {k: getattr(model, k) for k in shape} == {k: getattr(original, k) for k in shape}


def test_llama4_empty_no_rope_layers_is_the_default_interval(tmp_path):
    raw = json.loads((HF / "meta-llama--Llama-4-Maverick-17B-128E-Instruct_config.json").read_text())
    text = raw["text_config"]
    text["no_rope_layers"] = []
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    model = model_from_hf_config(path)
    published = model_from_hf_config(HF / "meta-llama--Llama-4-Maverick-17B-128E-Instruct_config.json")
    assert model.param_count() == published.param_count()
    assert any("NoPE" in n for n in model.notes)


def test_docs_models_counts_are_this_matrix():
    from perfmodel.paths import repo_root

    families = [mt for mt in _claimed() if mt in _mapping() and mt not in DEFAULT_REFUSED]
    real = [f.name for f in HF.glob("*_config.json")
            if json.loads(f.read_text()).get("model_type") in _mapping() and f.name not in REAL_REFUSED]
    doc = " ".join((repo_root() / "docs" / "models.md").read_text().split())
    assert f"{len(families)} families by their defaults and {len(real)} real configs are accepted" in doc
