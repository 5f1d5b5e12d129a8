import os, json, mistral_common

from mistral_common.tokens.tokenizers import tekken as _tk
_orig = _tk.Tekkenizer.__init__
def _init(self, *a, **k):
    _orig(self, *a, **k)
    self._all_special_tokens = [
        (t["token_str"].value if hasattr(t["token_str"], "value") else t["token_str"]) if isinstance(t, dict) else t
        for t in self._all_special_tokens]
_tk.Tekkenizer.__init__ = _init
from transformers import Qwen3MoeConfig
from transformers.integrations.mistral import convert_tekken_tokenizer
d = "/tmp/fe-sglang/model"
cfg = Qwen3MoeConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144,
    num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
    num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
    max_position_embeddings=40960, rope_theta=1e6, torch_dtype="bfloat16",
    decoder_sparse_step=1, norm_topk_prob=True, tie_word_embeddings=False)
cfg.architectures = ["Qwen3MoeForCausalLM"]
cfg.save_pretrained(d)
tek = os.path.join(os.path.dirname(mistral_common.__file__), "data", "tekken_240911.json")
tok = convert_tekken_tokenizer(tek)
# ChatML template (Qwen style) so OpenAIServingChat can apply a chat template
tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                     "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
tok.save_pretrained(d)
print(type(tok), len(tok), os.listdir(d))
