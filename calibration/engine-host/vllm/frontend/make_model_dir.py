"""Local HF-style model dir for Qwen3-30B-A3B (dims only, no weights) plus a fast tokenizer
converted from the Tekken vocab shipped in the mistral_common wheel (Hugging Face is
unreachable here), with a ChatML chat template (Qwen style) so /v1/chat/completions works.
Same recipe as ../make_model_dir.py, written to /tmp/fe-vllm/model_qwen3moe."""
import os, sys, mistral_common
from transformers import Qwen3MoeConfig
from transformers.integrations.mistral import LlamaTokenizerFast, MistralConverter


def convert_tekken_tokenizer(tokenizer_file):
    """transformers 4.57's convert_tekken_tokenizer, adapted to mistral_common 1.13
    (whose _all_special_tokens entries are dicts with a 'token_str')."""
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    mt = MistralTokenizer.from_file(tokenizer_file)
    vocab = mt.instruct_tokenizer.tokenizer._tekken_token2id_nospecial
    all_special = []
    for t in mt.instruct_tokenizer.tokenizer._all_special_tokens:
        t = t["token_str"] if isinstance(t, dict) else t
        all_special.append(t.value if hasattr(t, "value") else t)
    specials = {tok: i for i, tok in enumerate(all_special)}
    specials.update(vocab)
    tok = LlamaTokenizerFast(tokenizer_object=MistralConverter(
        vocab=specials, additional_special_tokens=all_special).converted())
    tok.add_special_tokens({"additional_special_tokens": all_special})
    return tok

d = sys.argv[1] if len(sys.argv) > 1 else "/tmp/fe-vllm/model_qwen3moe"
cfg = Qwen3MoeConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144,
    num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
    num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
    max_position_embeddings=40960, rope_theta=1e6, torch_dtype="bfloat16",
    decoder_sparse_step=1, norm_topk_prob=True, tie_word_embeddings=False)
cfg.architectures = ["Qwen3MoeForCausalLM"]
cfg.save_pretrained(d)
tek = os.path.join(os.path.dirname(mistral_common.__file__), "data", "tekken_240911.json")
tok = convert_tekken_tokenizer(tek)
tok.chat_template = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
tok.save_pretrained(d)
print(type(tok).__name__, len(tok), sorted(os.listdir(d)))
