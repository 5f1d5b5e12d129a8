"""Model descriptors, their loader and the Hugging Face config.json importer."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from perfmodel.errors import InputError
from perfmodel.models import (
    MLA, MoE, Model, attention_params, ffn_params, is_moe_layer, list_models, load_model,
    model_from_hf_config,
)

HF = Path(__file__).parent / "data" / "hf"

# Published totals (model cards / papers); (total, active).
PUBLISHED = {
    "llama-3.1-8b": (8.03e9, None),
    "llama-3.1-70b": (70.6e9, None),
    "llama-3.1-405b": (405.9e9, None),
    "llama-2-7b": (6.74e9, None),
    "llama-2-13b": (13.0e9, None),
    "llama-2-70b": (69.0e9, None),
    "mixtral-8x7b": (46.7e9, 12.9e9),
    "qwen2.5-72b": (72.7e9, None),
    "deepseek-v3": (671e9, 37e9),  # main model; the 14B MTP module is not counted
    "gpt-3-175b": (175e9, None),
}


@pytest.mark.parametrize("key", sorted(PUBLISHED))
def test_param_counts_match_published(key):
    m = load_model(key)
    total, active = PUBLISHED[key]
    tol = 0.02 if key == "deepseek-v3" else 0.015
    assert m.param_count() == pytest.approx(total, rel=tol)
    if active is not None:
        assert m.active_param_count() == pytest.approx(active, rel=tol)
    else:
        assert m.active_param_count() == m.param_count()


def test_deepseek_v3_breakdown():
    m = load_model("deepseek-v3")
    assert [is_moe_layer(m, i) for i in range(4)] == [False, False, False, True]
    assert ffn_params(m, 0) == 3 * 7168 * 18432
    # 256 routed + 1 shared expert of 3 * 7168 * 2048, and the router
    assert ffn_params(m, 3) == 257 * 3 * 7168 * 2048 + 7168 * 256
    assert ffn_params(m, 3, active=True) == 9 * 3 * 7168 * 2048 + 7168 * 256
    assert attention_params(m) == pytest.approx(187.1e6, rel=0.002)


def test_shipped_descriptors_load_and_have_sources():
    models = list_models()
    keys = [m.key for m in models]
    assert keys == sorted(keys)
    assert {"llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-2-7b", "llama-2-13b", "llama-2-70b",
            "mixtral-8x7b", "qwen2.5-72b", "deepseek-v3", "gpt-3-175b"} <= set(keys)
    for m in models:
        assert isinstance(m, Model) and m.source
        assert m.heads % m.kv_heads == 0


@pytest.mark.parametrize("name,key", [
    ("llama70b", "llama-3.1-70b"), ("llama-70b", "llama-3.1-70b"), ("Llama-3.1-70B", "llama-3.1-70b"),
    ("llama3.1-70b", "llama-3.1-70b"), ("LLAMA70B", "llama-3.1-70b"), ("meta-llama/Llama-3.1-70B", "llama-3.1-70b"),
    ("llama8b", "llama-3.1-8b"), ("llama405b", "llama-3.1-405b"), ("llama-3.1-405b", "llama-3.1-405b"),
    ("llama2-70b", "llama-2-70b"), ("llama-2-70b", "llama-2-70b"), ("llama2-7b", "llama-2-7b"),
    ("llama-2-7b", "llama-2-7b"), ("llama_2_13b", "llama-2-13b"),
    ("mixtral", "mixtral-8x7b"), ("mixtral-8x7b", "mixtral-8x7b"), ("Mixtral-8x7B", "mixtral-8x7b"),
    ("qwen72b", "qwen2.5-72b"), ("qwen2.5-72b", "qwen2.5-72b"),
    ("deepseek-v3", "deepseek-v3"), ("dsv3", "deepseek-v3"), ("DeepSeek-V3", "deepseek-v3"),
    ("gpt3", "gpt-3-175b"), ("gpt-3-175b", "gpt-3-175b"), ("mistral", "mistral-7b"),
])
def test_aliases_resolve(name, key):
    assert load_model(name).key == key


def test_unknown_name_suggests_close_matches():
    with pytest.raises(InputError) as e:
        load_model("llama71b")
    msg = str(e.value)
    assert "\n" not in msg and "llama71b" in msg and "closest" in msg and "llama-3.1-70b" in msg
    with pytest.raises(InputError) as e:
        load_model("mixtrall")
    assert "mixtral-8x7b" in str(e.value)
    with pytest.raises(InputError) as e:
        load_model("zzzzzz")
    assert "known:" in str(e.value)


def test_shipped_dims():
    m = load_model("llama-3.1-405b")
    assert (m.hidden, m.layers, m.heads, m.kv_heads, m.intermediate, m.vocab) == (16384, 126, 128, 8, 53248, 128256)
    m = load_model("llama-2-70b")
    assert (m.kv_heads, m.intermediate, m.vocab) == (8, 28672, 32000)
    m = load_model("mixtral")
    assert m.moe == MoE(num_experts=8, top_k=2, expert_intermediate=14336)
    assert load_model("qwen72b").qkv_bias
    m = load_model("dsv3")
    assert m.mla == MLA(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    assert m.moe == MoE(256, 8, 2048, 1, 2048, 3, expert_groups=8, groups_per_token=4, router="sigmoid_bias_grouped")
    assert any("num_nextn_predict_layers" in n or "multi-token" in n for n in m.notes)
    g = load_model("gpt3")
    assert (g.mlp, g.norm, g.position, g.max_position, g.tied_embeddings, g.head_dim) == (
        "gelu", "layernorm", "learned", 2048, True, 128)


# ---- descriptor validation ------------------------------------------------------------------------

GOOD = """\
key: tiny
name: Tiny
family: llama
hidden: 256
layers: 2
heads: 4
intermediate: 512
vocab: 1000
"""


def _write(tmp_path: Path, text: str, name: str = "tiny.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_descriptor_path_and_defaults(tmp_path):
    m = load_model(_write(tmp_path, GOOD))
    assert (m.kv_heads, m.head_dim, m.mlp, m.norm, m.position, m.moe, m.mla) == (4, 64, "swiglu", "rmsnorm", "rope", None, None)
    assert load_model(str(tmp_path / "tiny.yaml")) == m


def _err(path) -> InputError:
    with pytest.raises(InputError) as e:
        load_model(path)
    assert "\n" not in str(e.value)
    return e.value


def test_unknown_key_suggests(tmp_path):
    e = _err(_write(tmp_path, GOOD + "hiden_size: 3\nintermediat: 5\n"))
    assert e.field == "hiden_size" and str(tmp_path) in str(e) and "hidden" in str(e)
    e = _err(_write(tmp_path, GOOD + "moe: {num_experts: 4, top_k: 1, expert_intermediat: 8}\n"))
    assert e.field == "moe.expert_intermediat" and "expert_intermediate" in str(e)


def test_missing_field(tmp_path):
    e = _err(_write(tmp_path, GOOD.replace("vocab: 1000\n", "")))
    assert e.field == "vocab" and "missing" in str(e) and e.file.endswith("tiny.yaml")
    e = _err(_write(tmp_path, GOOD + "moe: {num_experts: 4, expert_intermediate: 8}\n"))
    assert e.field == "moe.top_k"


@pytest.mark.parametrize("edit,field", [
    (("layers: 2", "layers: -2"), "layers"),
    (("hidden: 256", "hidden: 0"), "hidden"),
    (("heads: 4", "heads: four"), "heads"),
    (("heads: 4", "heads: 4.5"), "heads"),
    (("heads: 4", "heads: true"), "heads"),
    (("family: llama", "family: lama"), "family"),
    (("vocab: 1000", "vocab: 1000\nmlp: relu"), "mlp"),
    (("vocab: 1000", "vocab: 1000\nkv_heads: 3"), "kv_heads"),
    (("vocab: 1000", "vocab: 1000\ntied_embeddings: yes-please"), "tied_embeddings"),
    (("vocab: 1000", "vocab: 1000\nposition: learned"), "max_position"),
    (("vocab: 1000", "vocab: 1000\nmoe: {num_experts: 4, top_k: 8, expert_intermediate: 8}"), "moe.top_k"),
    (("vocab: 1000", "vocab: 1000\nmla: {kv_lora_rank: -1, qk_nope_head_dim: 1, qk_rope_head_dim: 1, v_head_dim: 1}"),
     "mla.kv_lora_rank"),
    (("key: tiny", "key: Tiny Model"), "key"),
])
def test_bad_values(tmp_path, edit, field):
    e = _err(_write(tmp_path, GOOD.replace(*edit)))
    assert e.field == field
    assert str(e).startswith(f"{tmp_path / 'tiny.yaml'}: {field}: ")
    assert "expected" in str(e) or "missing" in str(e)


def test_bad_yaml_and_missing_file(tmp_path):
    e = _err(_write(tmp_path, "key: [unclosed\n"))
    assert "YAML" in str(e)
    e = _err(_write(tmp_path, "- just\n- a list\n"))
    assert "mapping" in str(e)
    e = _err(tmp_path / "nope.yaml")
    assert "no such file" in str(e)


def test_registry_rejects_alias_clash(tmp_path, monkeypatch):
    d = tmp_path / "workloads" / "models"
    d.mkdir(parents=True)
    (d / "a.yaml").write_text(GOOD.replace("key: tiny", "key: a") + "aliases: [shared]\n")
    (d / "b.yaml").write_text(GOOD.replace("key: tiny", "key: b") + "aliases: [shared]\n")
    monkeypatch.setenv("PERFMODEL_ROOT", str(tmp_path))
    e = _err("a")
    assert e.field == "aliases" and "shared" in str(e)
    (d / "b.yaml").write_text(GOOD.replace("key: tiny", "key: b") + "aliases: [bee]\n")
    assert load_model("BEE").key == "b"
    assert [m.key for m in list_models()] == ["a", "b"]


# ---- Hugging Face import --------------------------------------------------------------------------

# fp4_unquantized describes NVIDIA's NVFP4 release of the model, another checkpoint than the config.json's
_IDENTITY = {"key", "name", "aliases", "source", "notes", "fp4_unquantized"}


def _dims(m: Model) -> dict:
    return {f.name: getattr(m, f.name) for f in dataclasses.fields(m) if f.name not in _IDENTITY}


@pytest.mark.parametrize("fixture,key", [
    ("llama-3.1-8b.json", "llama-3.1-8b"), ("llama-2-7b.json", "llama-2-7b"), ("mistral-7b.json", "mistral-7b"),
    ("mixtral-8x7b.json", "mixtral-8x7b"), ("qwen2.5-72b.json", "qwen2.5-72b"), ("deepseek-v3.json", "deepseek-v3"),
])
def test_hf_import_matches_descriptor(fixture, key):
    imported = model_from_hf_config(HF / fixture)
    shipped = load_model(key)
    assert _dims(imported) == _dims(shipped)
    assert imported.param_count() == shipped.param_count()
    assert load_model(HF / fixture) == imported  # load_model takes config.json paths too
    assert load_model(str(HF / fixture)) == imported


def test_hf_notes_report_unused_fields():
    assert model_from_hf_config(HF / "llama-2-7b.json").notes == ()  # all fields known and harmless
    assert model_from_hf_config(HF / "mixtral-8x7b.json").notes == ()  # sliding_window: null
    assert model_from_hf_config(HF / "qwen2.5-72b.json").notes == ()  # use_sliding_window: false
    n = model_from_hf_config(HF / "mistral-7b.json").notes
    assert n == ("config.json fields not used: sliding_window",)
    assert "rope_scaling" in model_from_hf_config(HF / "llama-3.1-8b.json").notes[0]
    ds = " | ".join(model_from_hf_config(HF / "deepseek-v3.json").notes)
    assert "quantization_config" in ds and "rope_scaling" in ds and "num_nextn_predict_layers" in ds


def test_hf_unknown_fields_land_in_notes(tmp_path):
    cfg = json.loads((HF / "llama-3.1-8b.json").read_text())
    cfg.update(sliding_window=4096, some_new_thing=1)
    d = tmp_path / "My-Llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    m = load_model(d)  # a snapshot folder
    assert m.key == "my-llama" and m.name == "My-Llama"
    assert m.notes[0].startswith("config.json fields not used: ")
    for f in ("rope_scaling", "sliding_window", "some_new_thing"):
        assert f in m.notes[0]
    assert model_from_hf_config(d / "config.json") == m
    # a Qwen2 sliding window that is switched on is reported too
    q = json.loads((HF / "qwen2.5-72b.json").read_text())
    q["use_sliding_window"] = True
    (tmp_path / "q.json").write_text(json.dumps(q))
    assert "sliding_window" in model_from_hf_config(tmp_path / "q.json").notes[0]


def test_hf_defaults(tmp_path):
    cfg = json.loads((HF / "llama-2-7b.json").read_text())
    del cfg["num_key_value_heads"]
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    m = model_from_hf_config(tmp_path / "c.json")
    assert (m.kv_heads, m.head_dim) == (32, 128)
    cfg["head_dim"] = 64  # an explicit head_dim wins (Mistral-Nemo style)
    (tmp_path / "d.json").write_text(json.dumps(cfg))
    assert model_from_hf_config(tmp_path / "d.json").head_dim == 64


def test_hf_unsupported_architecture():
    with pytest.raises(InputError) as e:
        model_from_hf_config(HF / "gpt2-unsupported.json")
    assert e.value.field == "model_type" and "gpt2" in str(e.value)
    assert str(e.value).startswith(str(HF / "gpt2-unsupported.json"))
    assert "\n" not in str(e.value)


def test_hf_architecture_without_model_type(tmp_path):
    cfg = json.loads((HF / "gpt2-unsupported.json").read_text())
    del cfg["model_type"]
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError) as e:
        model_from_hf_config(tmp_path / "c.json")
    assert e.value.field == "architectures" and "GPT2LMHeadModel" in str(e.value)


def test_hf_missing_and_bad_fields(tmp_path):
    cfg = json.loads((HF / "mixtral-8x7b.json").read_text())
    del cfg["num_local_experts"]
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError) as e:
        model_from_hf_config(tmp_path / "c.json")
    assert e.value.field == "num_local_experts" and "missing" in str(e.value)
    cfg = json.loads((HF / "llama-2-7b.json").read_text())
    cfg["hidden_size"] = -1
    (tmp_path / "d.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError) as e:
        model_from_hf_config(tmp_path / "d.json")
    assert e.value.field == "hidden_size"
    ds = json.loads((HF / "deepseek-v3.json").read_text())
    ds["moe_layer_freq"] = 2
    (tmp_path / "e.json").write_text(json.dumps(ds))
    with pytest.raises(InputError) as e:
        model_from_hf_config(tmp_path / "e.json")
    assert e.value.field == "moe_layer_freq"
    (tmp_path / "f.json").write_text("{not json")
    with pytest.raises(InputError) as e:
        model_from_hf_config(tmp_path / "f.json")
    assert "JSON" in str(e.value)


def test_cache_sees_edits(tmp_path):
    p = tmp_path / "config.json"
    shutil.copy(HF / "llama-2-7b.json", p)
    a = model_from_hf_config(p)
    assert model_from_hf_config(p) is a  # cached
    cfg = json.loads(p.read_text())
    cfg["num_hidden_layers"] = 16
    p.write_text(json.dumps(cfg, indent=1))
    assert model_from_hf_config(p).layers == 16
