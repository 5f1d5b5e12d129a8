"""Write a local HF-style model dir for Qwen3-30B-A3B (hand-filled dims, no weights)
plus a fast tokenizer converted from the Tekken vocab shipped in the mistral_common wheel
(Hugging Face is unreachable, so Qwen's own tokenizer cannot be fetched)."""
import os, glob, mistral_common
from transformers import Qwen3MoeConfig
from transformers.integrations.mistral.tokenizer import convert_tekken_tokenizer
d = "/tmp/vllm-host/model_qwen3moe"
cfg = Qwen3MoeConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144,
    num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
    num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
    max_position_embeddings=40960, rope_theta=1e6, torch_dtype="bfloat16",
    decoder_sparse_step=1, norm_topk_prob=True, tie_word_embeddings=False)
cfg.architectures = ["Qwen3MoeForCausalLM"]
cfg.save_pretrained(d)
tek = os.path.join(os.path.dirname(mistral_common.__file__), "data", "tekken_240911.json")
tok = convert_tekken_tokenizer(tek)
tok.save_pretrained(d)
print(type(tok), len(tok), os.listdir(d))
