"""``perfmodel deploy``: the launch files that start a plan ``perfmodel plan --format json`` ranked.

For TensorRT-LLM (``trtllm-serve`` and its extra LLM-API options YAML), vLLM (``vllm serve``) and SGLang
(``python3 -m sglang.launch_server``): a shell script per role (``serve.sh``; ``prefill.sh``, ``decode.sh`` and
``router.sh`` when disaggregated), the engine's config files, ``k8s.yaml`` (plain Kubernetes objects running the
same commands) and ``README.txt`` (which plan, which engine version, where every value comes from).

The engines' option names are data (``options/<engine>.yaml``, with the release they were read from and a
source for each); the writers emit only what those tables hold (:mod:`.options`). Modules: :mod:`.plan` reads
and checks the plan, :mod:`.target` derives the settings, one module per engine maps the plan's fields to that
engine's options in one place, :mod:`.kubernetes` writes the manifest, :mod:`.writer` builds and writes the
files. docs/deploy.md.
"""
from __future__ import annotations

from .writer import Deployment, build, write

__all__ = ["Deployment", "build", "write"]
