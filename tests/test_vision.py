"""Vision-language models (issue 29): the encoder read from config.json against transformers' own modules, image
tokens by the processors' rules, the encoder in TTFT and memory, and text-only projections untouched."""
from __future__ import annotations

import dataclasses
import importlib
import json
import logging
from pathlib import Path

import pytest

from perfmodel import project
from perfmodel.cli import main
from perfmodel.graph import Step, build_ops
from perfmodel.models import load_model, model_from_hf_config
from perfmodel.scenario import Scenario
from perfmodel.vision import media, qwen_windows, with_images
from perfmodel.vision_config import VisionConfigError, vision_from_hf

HF = Path(__file__).parent / "data" / "hf_configs"
QWEN3_VL_8B = HF / "Qwen--Qwen3-VL-8B-Instruct_config.json"
QWEN3_VL_30B = HF / "Qwen--Qwen3-VL-30B-A3B-Instruct_config.json"
GEMMA3_27B = HF / "google--gemma-3-27b-it_config.json"
QWEN3_5 = HF / "Qwen--Qwen3.5-397B-A17B_config.json"
logging.getLogger("transformers").setLevel(logging.ERROR)

# model_type -> (transformers module, vision tower class, projector class or None: the tower holds its merger)
TOWERS = {
    "qwen2_5_vl": ("qwen2_5_vl", "Qwen2_5_VisionTransformerPretrainedModel", None),
    "qwen3_vl": ("qwen3_vl", "Qwen3VLVisionModel", None),
    "qwen3_vl_moe": ("qwen3_vl_moe", "Qwen3VLMoeVisionModel", None),
    "qwen3_5": ("qwen3_5", "Qwen3_5VisionModel", None),
    "qwen3_5_moe": ("qwen3_5_moe", "Qwen3_5MoeVisionModel", None),
    "llama4": ("llama4", "Llama4VisionModel", "Llama4MultiModalProjector"),
    "gemma3": ("siglip", "SiglipVisionModel", "Gemma3MultiModalProjector"),
    "internvl": ("internvl", "InternVLVisionModel", "InternVLMultiModalProjector"),
}


def _transformers():
    return pytest.importorskip("transformers")


def _config(mt: str, **raw):
    """transformers' config of ``mt``: its library defaults, or ``raw`` (a real config.json) as it reads it."""
    tf = _transformers()
    try:
        return tf.AutoConfig.for_model(mt, **raw)
    except (KeyError, ValueError):
        pytest.skip(f"this transformers has no config class for {mt}")


def _reference_params(mt: str, cfg) -> int:
    """The vision tower's and projector's parameters as transformers builds them (on the meta device: no memory)."""
    torch = pytest.importorskip("torch")
    mod, tower, proj = TOWERS[mt]
    try:
        tower_cls = getattr(importlib.import_module(f"transformers.models.{mod}.modeling_{mod}"), tower)
        proj_cls = getattr(importlib.import_module(f"transformers.models.{mt}.modeling_{mt}"), proj) if proj else None
    except (ImportError, AttributeError):
        pytest.skip(f"this transformers has no {tower} for {mt}")
    with torch.device("meta"):
        parts = [tower_cls(cfg.vision_config)] + ([proj_cls(cfg)] if proj_cls else [])
    return sum(p.numel() for part in parts for p in part.parameters())


def _ours(mt: str, cfg) -> int:
    d = cfg.to_dict()
    return vision_from_hf(d, mt, d["text_config"]["hidden_size"]).param_count()


# ---- the encoder's parameters against transformers' modules -------------------------------------------------

@pytest.mark.parametrize("mt", sorted(set(TOWERS) - {"gemma3"}))
def test_default_config_encoder_parameters_are_transformers(mt):
    cfg = _config(mt)
    assert _ours(mt, cfg) == _reference_params(mt, cfg)


@pytest.mark.parametrize("variant", [
    {"use_qk_norm": True, "norm_type": "rms_norm", "attention_bias": True, "use_mean_pooling": False},
    {"use_mask_token": True, "use_absolute_position_embeddings": False, "hidden_size": 1280, "num_attention_heads": 10},
])
def test_internvl_variants_are_transformers(variant):
    cfg = _config("internvl")
    for k, v in variant.items():
        setattr(cfg.vision_config, k, v)
    assert _ours("internvl", cfg) == _reference_params("internvl", cfg)


@pytest.mark.parametrize("path,mt", [(QWEN3_VL_8B, "qwen3_vl"), (QWEN3_VL_30B, "qwen3_vl_moe"),
                                     (GEMMA3_27B, "gemma3"), (QWEN3_5, "qwen3_5_moe")])
def test_real_config_encoder_parameters_are_transformers(path, mt):
    raw = json.loads(path.read_text())
    cfg = _config(mt, **{k: v for k, v in raw.items() if k != "model_type"})
    imported = model_from_hf_config(path).vision
    assert imported is not None and imported.param_count() == _reference_params(mt, cfg)


def test_gemma3_default_vision_config_cannot_pool_and_the_text_model_still_imports(tmp_path):
    cfg = _config("gemma3").to_dict()  # SiglipVisionConfig's 224-pixel tiles of 16: 14 patches a side, not 16 x k
    with pytest.raises(VisionConfigError, match="pool"):
        vision_from_hf(cfg, "gemma3", cfg["text_config"]["hidden_size"])
    cfg["architectures"] = ["Gemma3ForConditionalGeneration"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = model_from_hf_config(path)
    assert m.vision is None and any("not modelled" in n and "pool" in n for n in m.notes)


def test_descriptors_carry_the_imported_encoder():
    assert load_model("gemma-3-27b").vision == model_from_hf_config(GEMMA3_27B).vision
    assert load_model("qwen3.5-397b-a17b").vision == model_from_hf_config(QWEN3_5).vision
    assert load_model("llama70b").vision is None


def test_flat_qwen2_5_vl_config_is_the_nested_one(tmp_path):
    nested = _config("qwen2_5_vl").to_dict()
    nested["architectures"] = ["Qwen2_5_VLForConditionalGeneration"]
    flat = {k: v for k, v in nested.items() if k != "text_config"}
    flat.update({k: v for k, v in nested["text_config"].items() if k != "model_type"})
    a, b = tmp_path / "nested.json", tmp_path / "flat.json"
    a.write_text(json.dumps(nested))
    b.write_text(json.dumps(flat))
    ma, mb = model_from_hf_config(a), model_from_hf_config(b)
    assert ma.vision == mb.vision and ma.param_count() == mb.param_count() and ma.family == mb.family == "qwen2"
    assert ma.qkv_bias  # Qwen2.5-VL's text model is Qwen2's decoder


# ---- image tokens ----------------------------------------------------------------------------------------------

def _qwen2_5_vl(tmp_path, pre: dict | None = None):
    cfg = _config("qwen2_5_vl").to_dict()
    cfg["architectures"] = ["Qwen2_5_VLForConditionalGeneration"]
    folder = tmp_path / "qwen2_5_vl"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    if pre is not None:
        (folder / "preprocessor_config.json").write_text(json.dumps(pre))
    return model_from_hf_config(folder / "config.json")


def _media(model, images=1, size=(1092, 1092), frames=0):
    return media(model.vision, Scenario(images=images, image_size=size, video_frames=frames))


def test_qwen2_5_vl_tokens_follow_smart_resize(tmp_path):
    # Qwen2VLImageProcessor's defaults (max_pixels 28*28*1280 = 1,003,520): 1092^2 = 1,192,464 pixels is too many;
    # beta = sqrt(1192464 / 1003520), each side floor(1092 / beta / 28) * 28 = 980: 70 x 70 patches, 1225 tokens
    m = _qwen2_5_vl(tmp_path)
    assert m.vision.processor.startswith("the processor class's defaults")
    assert _media(m).tokens == 70 * 70 // 4 == 1225
    # a checkpoint whose preprocessor_config.json allows the whole image: (1092 / 14)^2 / 4 = 1521
    big = _qwen2_5_vl(tmp_path, {"min_pixels": 3136, "max_pixels": 2_000_000})
    assert big.vision.processor == "preprocessor_config.json" and big.vision.max_pixels == 2_000_000
    got = _media(big)
    assert got.tokens == (1092 // 14) ** 2 // 4 == 1521 and got.patches == 78 * 78
    assert _media(big, images=3).tokens == 3 * 1521
    # rounding to the nearest multiple of 28 (patch x merge): 1000 -> 1008 = 36 x 28
    assert _media(big, size=(1000, 500)).tokens == (1008 // 14) * (504 // 14) // 4
    # below min_pixels: scaled up (ceil) to at least 3136 pixels
    assert _media(big, size=(10, 10)).tokens == (56 // 14) * (56 // 14) // 4


def test_qwen2_5_vl_windows_are_transformers_window_index(tmp_path):
    torch = pytest.importorskip("torch")
    try:
        from transformers.vision_utils import get_vision_window_index
    except ImportError:
        pytest.skip("this transformers has no vision_utils.get_vision_window_index")
    v = _qwen2_5_vl(tmp_path).vision
    for gh, gw in ((78, 78), (36, 100), (4, 4), (6, 10)):
        _, cu = get_vision_window_index(torch.tensor([[1, gh, gw]]), v.merge, v.window * v.merge * v.patch, v.patch)
        theirs = sorted((cu[1:] - cu[:-1]).tolist())
        ours = sorted(length for n, length in qwen_windows(v, gh, gw) for _ in range(n))
        assert ours == theirs, (gh, gw)


def test_qwen3_vl_tokens_and_video():
    m = model_from_hf_config(QWEN3_VL_8B)
    v = m.vision
    assert (v.patch, v.merge, v.deepstack) == (16, 2, (8, 16, 24))
    # factor 32: 1024^2 = 1,048,576 > 1,003,520 pixels; floor(1024 / beta / 32) * 32 = 992: 62 x 62 patches
    assert _media(m, size=(1024, 1024)).tokens == 62 * 62 // 4 == 961
    # Qwen3VLVideoProcessor: 8 frames of 640 x 480, limits over all frames (32*32*768 = 786,432 pixels):
    # t_bar 8, 8 x 640 x 480 = 2,457,600 > the limit; beta = sqrt(2457600 / 786432) = 1.768; sides 352 x 256
    got = _media(m, images=0, size=(640, 480), frames=8)
    assert got.tokens == 4 * (352 // 16) * (256 // 16) // 4 and got.seqs == ((4, 22 * 16),)
    with pytest.raises(Exception, match="at least 2 frames"):
        _media(m, images=0, size=(640, 480), frames=1)


def test_tiling_families_tokens():
    # Llama 4: tiles of vision_config.image_size (transformers' default 448, patch 14: 32 x 32 patches, pixel
    # shuffle 0.5 -> 256 tokens a tile); one tile for a square image that fits, 4 + the global one for 2 x 2
    cfg = _config("llama4").to_dict()
    v = vision_from_hf(cfg, "llama4", cfg["text_config"]["hidden_size"])
    one = media(v, Scenario(images=1, image_size=(448, 448)))
    assert one.tokens == 256 and one.seqs == ((1, 32 * 32 + 1),)  # the class token joins each tile
    assert media(v, Scenario(images=1, image_size=(896, 896))).tokens == 5 * 256
    assert media(v, Scenario(images=1, image_size=(896, 448))).tokens == 3 * 256  # 1 x 2 tiles + global
    # InternVL: 448 tiles of 32 x 32 patches, downsample_ratio 0.5 -> 256 tokens a tile; a 2:1 image -> 2 x 1 grid
    cfg = _config("internvl").to_dict()
    v = vision_from_hf(cfg, "internvl", cfg["text_config"]["hidden_size"])
    assert media(v, Scenario(images=1, image_size=(448, 448))).tokens == 256
    assert media(v, Scenario(images=1, image_size=(896, 448))).tokens == 3 * 256
    # Gemma 3: every image one 896-pixel tile, pooled to mm_tokens_per_image
    g = model_from_hf_config(GEMMA3_27B).vision
    for size in ((100, 100), (4000, 3000)):
        got = media(g, Scenario(images=2, image_size=size))
        assert got.tokens == 2 * 256 and got.patches == 2 * 64 * 64


# ---- the encoder in a projection -------------------------------------------------------------------------------

def test_ttft_grows_with_images_and_the_encoder_shows():
    m = model_from_hf_config(QWEN3_VL_8B)
    runs = [project("h200-sxm", m, images=n, image_size=(1024, 1024) if n else None, isl=512, osl=32)
            for n in (0, 1, 4)]
    assert runs[0].ttft_s < runs[1].ttft_s < runs[2].ttft_s
    assert runs[0].tpot_s < runs[2].tpot_s  # the cache holds the image tokens
    assert not any(t.op.name.startswith("vision.") for t in runs[0].prefill.times)
    names = {t.op.name for t in runs[1].prefill.times}
    assert {"vision.patch_embed", "vision.attn.core", "vision.merger.fc1", "vision.deepstack.fc1"} <= names
    assert not any(t.op.name.startswith("vision.") for t in runs[1].decode.times)
    assert runs[1].scenario.prompt == 512 + 961 and runs[1].prefill.seq == 512 + 961
    assert any(a.startswith("images: ") for a in runs[1].assumptions)


def test_windowed_and_full_layers():
    cfg = _config("qwen2_5_vl").to_dict()
    cfg["architectures"] = ["Qwen2_5_VLForConditionalGeneration"]
    m = dataclasses.replace(load_model("llama-3.1-8b"), vision=vision_from_hf(cfg, "qwen2_5_vl", 4096))
    sc = with_images(m, Scenario(images=1, image_size=(1092, 1092)).for_hardware(None))
    ops = {op.name: op for op in build_ops(m, Step("prefill", 1, sc.prompt, 0), sc)}
    full, window = ops["vision.attn.core"], ops["vision.attn.core.window"]
    assert full.count == len(m.vision.full_layers) == 4 and window.count == m.vision.layers - 4
    assert window.params["seq_q"] < full.params["seq_q"]  # windows of at most 64 patches against the whole image
    tokens = lambda op: op.params["batch"] * op.params["seq_q"]  # noqa: E731
    assert tokens(window) == pytest.approx(tokens(full))


def test_memory_holds_the_encoder_and_the_image_tokens():
    m = model_from_hf_config(QWEN3_VL_8B)
    text = project("h200-sxm", m, isl=512, osl=32)
    img = project("h200-sxm", m, images=2, image_size=(1024, 1024), isl=512, osl=32)
    from perfmodel import vision

    enc = vision.weight_bytes(m.vision, img.scenario)
    assert enc == pytest.approx(m.vision.param_count() * 2)  # bf16, one GPU
    assert img.memory.weights == pytest.approx(text.memory.weights + enc)
    assert img.memory.activations > text.memory.activations
    per_token = text.memory.kv_per_sequence / (512 + 32)
    assert img.memory.kv_per_sequence == pytest.approx(per_token * (512 + 2 * 961 + 32))
    # split over TP ranks: the layers' products halve, the stem and merger stay whole
    tp2 = project("h200-sxm", m, images=2, image_size=(1024, 1024), isl=512, osl=32, tp=2)
    assert vision.weight_bytes(m.vision, tp2.scenario) < enc
    assert any(t.op.name == "vision.attn.allreduce" for t in tp2.prefill.times)


@pytest.mark.parametrize("engine", ["trtllm", "vllm", "hf"])
def test_text_only_ops_are_those_of_the_model_without_an_encoder(engine):
    m = model_from_hf_config(QWEN3_VL_30B)
    bare = dataclasses.replace(m, vision=None)
    assert m.vision is not None
    sc = Scenario(engine=engine, isl=700, osl=20, batch=3).for_hardware(None)
    for step in (Step("prefill", 2, 700, 0), Step("decode", 3, 1, 700)):
        assert build_ops(m, step, sc) == build_ops(bare, step, sc)
    a, b = project("h200-sxm", m, engine=engine, batch="max"), project("h200-sxm", bare, engine=engine, batch="max")
    assert (a.ttft_s, a.tpot_s, a.throughput_tok_s, a.memory) == (b.ttft_s, b.tpot_s, b.throughput_tok_s, b.memory)
    assert with_images(m, sc) is sc


def test_text_only_json_has_no_image_fields(capsys):
    assert main(["project", "--arch", "h200", "--model", "llama-3.1-8b", "--format", "json"]) == 0
    sc = json.loads(capsys.readouterr().out)["scenario"]
    assert not {"images", "image_size", "video_frames", "image_tokens", "prompt"} & set(sc)
    assert main(["project", "--arch", "h200", "--model", str(QWEN3_VL_8B), "--images", "1", "--image-size",
                 "1024x1024", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["scenario"]["image_tokens"] == 961 and d["scenario"]["prompt"] == 1024 + 961
    assert any(op["name"] == "vision.patch_embed" for op in d["ops"])


# ---- bad input: one line, exit 2 -------------------------------------------------------------------------------

@pytest.mark.parametrize("args,words", [
    (["--images", "-1", "--image-size", "64x64"], "--images"),
    (["--images", "300", "--image-size", "64x64"], "0 to 256"),
    (["--images", "1", "--image-size", "0x0"], "--image-size"),
    (["--images", "1", "--image-size", "100000x64"], "16384"),
    (["--images", "1", "--image-size", "big"], "WIDTHxHEIGHT"),
    (["--images", "2"], "--image-size"),
    (["--images", "1", "--image-size", "64x16000"], "aspect ratio"),
    (["--video-frames", "1", "--image-size", "640x480"], "at least 2 frames"),
    (["--video-frames", "9999", "--image-size", "640x480"], "0 to 768"),
])
def test_bad_image_flags_are_one_line(capsys, args, words):
    try:
        rc = main(["project", "--arch", "h200", "--model", str(QWEN3_VL_8B), *args])
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("model,args,words", [
    ("llama-3.1-8b", ["--images", "1", "--image-size", "64x64"], "no vision encoder"),
    (str(GEMMA3_27B), ["--video-frames", "4", "--image-size", "64x64"], "Qwen-VL families only"),
])
def test_images_where_no_encoder_takes_them(capsys, model, args, words):
    rc = main(["project", "--arch", "h200", "--model", model, *args])
    err = capsys.readouterr().err
    assert rc == 2 and words in err and len(err.strip().splitlines()) == 1


def test_descriptor_vision_is_checked_in_one_line(tmp_path):
    from perfmodel.errors import InputError

    text = ("key: t\nname: T\nfamily: llama\nhidden: 256\nlayers: 2\nheads: 4\nintermediate: 512\nvocab: 1000\n"
            "vision: {%s}\n")
    vision = {"kind": "gemma3", "layers": "2", "hidden": "64", "heads": "4", "head_dim": "16", "intermediate": "128",
              "mlp": "gelu", "norm": "layernorm", "patch": "14", "image_size": "56", "merge": "2",
              "merge_kind": "pool", "tokens_per_image": "4", "merger": "[[64, 256, false]]"}

    def write(**change):
        fields = {**vision, **change}
        path = tmp_path / "m.yaml"
        path.write_text(text % ", ".join(f"{k}: {v}" for k, v in fields.items()))
        return str(path)

    m = load_model(write())
    assert m.vision.out_hidden == 256
    assert project("h200-sxm", m, images=1, image_size=(64, 64), isl=16, osl=4).scenario.image_tokens == 4
    for change, field in (({"colour": "red"}, "vision.colour"), ({"kind": "clip"}, "vision.kind"),
                          ({"head_dim": "8"}, "vision.head_dim"), ({"merger": "[[64]]"}, "vision.merger"),
                          ({"layers": "0"}, "vision.layers")):
        with pytest.raises(InputError) as e:
            load_model(write(**change))
        assert field in str(e.value) and "\n" not in str(e.value)


def test_descriptor_with_vision_projects_images(capsys):
    assert main(["project", "--arch", "h200", "--model", "gemma-3-27b", "--images", "2", "--image-size", "640x480",
                 "--ops"]) == 0
    out = capsys.readouterr().out
    assert "+ 2 images of 640x480 (512 tokens)" in out and "vision.attn.core" in out
