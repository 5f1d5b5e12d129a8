"""How a step picks its next tokens from the logits: the methods and, for a profile that has not measured them, the
passes over the fp32 logits each makes (perfmodel.measure.sampling measures them; perfmodel.fit.sampling fits
them into the memory kinds ``sample_<method>``)."""
from __future__ import annotations

SAMPLING_METHODS = ("greedy", "random", "top_k", "top_p")
# estimate, from the algorithms: argmax and a top-50 selection read the logits once; temperature, softmax and the
# exponential race read and write them about four times; a sort-based top-p sorts keys and indices, about 24
SAMPLE_PASSES = {"greedy": 1.0, "random": 4.0, "top_k": 1.0, "top_p": 24.0}
SAMPLING_KINDS = tuple(f"sample_{m}" for m in SAMPLING_METHODS)
