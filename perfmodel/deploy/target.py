"""What every engine writer reads: the chosen layout, the model path, the settings derived from the plan (or the
engine preset's defaults where the plan records none, each with where it came from), and the site the commands
run on (this host, or Kubernetes pods)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..engines import ENGINES, Engine
from ..errors import InputError
from ..safeyaml import CONTROL, printable
from .plan import Layout, Plan

PLACEHOLDER_MODEL = "REPLACE-WITH-MODEL-PATH"
# a library entry's source that names a Hugging Face repository: "org/name config.json ..."
_HF_SOURCE = re.compile(r"^([A-Za-z0-9][\w.-]*/[\w.-]+) config\.json\b")

# ports: the front (one aggregated instance, or the router), then each role's instances
FRONT_PORT = 8000
ROLE_PORT = {"serve": 8000, "prefill": 8100, "decode": 8200}
BOOTSTRAP_PORT = 8998  # SGLang's default disaggregation bootstrap port
NIXL_PORT = 5600  # vLLM's NIXL handshake, spaced by NIXL_STRIDE per instance on one host
NIXL_STRIDE = 100
POD_IP = "$(POD_IP)"  # an environment value that is the pod's own address (Kubernetes: a fieldRef, not text)


@dataclass(frozen=True)
class Role:
    name: str  # serve (aggregated) | prefill | decode
    count: int  # instances
    tp: int  # tensor-parallel degree of each (attention TP when attention-DP)
    gpus: int  # GPUs of each: tp x pp x attention-dp
    batch: int | None  # running-sequence cap; None: the engine's default (a prefill instance)
    offset: int = 0  # first instance's index among all instances (ports and GPUs on one host)


@dataclass
class Target:
    plan: Plan
    layout: Layout
    engine: str
    preset: Engine
    model_path: str
    model_origin: str  # where model_path came from, for README.txt
    model: object | None  # the library Model, when the plan's model is one
    draft_path: str | None = None
    notes: list[str] = field(default_factory=list)
    settings: list[tuple[str, str]] = field(default_factory=list)  # (what, value and where it came from)

    @property
    def vendor(self) -> str:
        return self.plan.vendor

    @property
    def same_engine(self) -> bool:
        return self.layout.plan_engine in (None, self.engine)

    def recorded(self, key: str):
        """A scenario value the plan recorded for this engine (None when it records none, or for another one:
        token budgets and memory shares mean different things in each engine)."""
        if key in ("prefill_chunk", "mem_fraction") and not self.same_engine:
            return None
        return self.layout.scenario.get(key)

    def roles(self) -> list[Role]:
        lay = self.layout
        if lay.mode == "aggregated":
            return [Role("serve", lay.instances, lay.tp, lay.instance_gpus(lay.tp), lay.batch)]
        return [Role("prefill", lay.prefill_instances, lay.tp, lay.instance_gpus(lay.tp), None),
                Role("decode", lay.decode_instances, lay.decode_tp, lay.instance_gpus(lay.decode_tp), lay.batch,
                     offset=lay.prefill_instances)]

    def max_num_tokens(self) -> int:
        v = self.recorded("prefill_chunk")
        return int(v) if v else self.preset.prefill_chunk

    def mem_fraction(self, role: Role) -> float:
        v = self.recorded("mem_fraction")
        return float(v) if v else float(self.preset.fraction_for(role.tp))

    def weight_dtype(self) -> str | None:
        return self.layout.scenario.get("dtype")

    def kv_dtype(self) -> str | None:
        """The KV-cache format the plan ran with: recorded, or the engine's rule on recorded weights; None when
        the plan says neither (the engine's own default: the model's dtype)."""
        kv = self.layout.scenario.get("kv_dtype")
        if kv:
            return kv
        dtype = self.weight_dtype()
        if dtype is None:
            return None
        rule = ENGINES.get(self.layout.plan_engine or "", self.preset)  # the rule of the engine the plan ran
        return "fp8" if rule.fp8_kv and dtype in ("fp8", "fp4") else "bf16"

    def ep_for(self, role: Role) -> int:
        """Expert-parallel degree of an instance of ``role`` (the plan drops it where it does not divide)."""
        ep = self.layout.ep
        return ep if ep > 1 and (role.tp * self.layout.attention_dp) % ep == 0 else 1

    def exchange(self, role: Role) -> str:
        """How the MoE layers of an instance of ``role`` meet the other ranks' tokens, as the plan priced them: the
        exchange the plan recorded (``--moe-exchange``), else the engine's rule for the layout (all_to_all for wide
        expert parallelism: :meth:`perfmodel.engines.Engine.exchange_for`); none without expert parallelism."""
        ep = self.ep_for(role)
        if ep == 1 or self.is_moe() is False:
            return "none"
        given = self.layout.scenario.get("moe_exchange")
        if given is not None:
            if given not in ("gather", "all_to_all"):
                raise InputError(f"expected gather or all_to_all, got {given!r}", file=self.plan.path,
                                 field="scenario.moe_exchange")
            return given
        adp = self.layout.attention_dp
        return self.preset.exchange_for(role.tp * adp, adp, ep)

    def is_moe(self) -> bool | None:
        return None if self.model is None else self.model.moe is not None

    def refuse(self, what: str, field_name: str) -> InputError:
        return InputError(f"{what} (options follow {self.preset.name} as perfmodel/deploy/options/{self.engine}.yaml "
                          "records them)", file=self.plan.path, field=field_name)


@dataclass(frozen=True)
class Site:
    """Where the commands run. ``local``: one host, every instance its own GPUs and ports, config files beside the
    scripts. ``k8s``: one pod per instance, each role's pods alike (a StatefulSet's or Deployment's template), so
    ports are per role, and a pod is reached by its stable DNS name."""
    local: bool
    name: str = "perfmodel"  # Kubernetes object name prefix
    config_dir: str = "/config"  # where the ConfigMap is mounted in a pod

    def port(self, role: str, i: int = 0) -> int:
        if role == "router":
            return FRONT_PORT
        return ROLE_PORT[role] + (i if self.local else 0)

    def address(self, role: str, i: int) -> str:
        """host:port of instance ``i`` of ``role`` as another process reaches it."""
        host = "localhost" if self.local else f"{self.name}-{role}-{i}.{self.name}-{role}"
        return f"{host}:{self.port(role, i)}"

    def bootstrap_port(self, i: int) -> int:
        return BOOTSTRAP_PORT + (i if self.local else 0)

    def config(self, filename: str) -> str:
        return filename if self.local else f"{self.config_dir}/{filename}"


def user_text(value: str, field_name: str, *, file: str | None = None) -> str:
    """Text a command will carry (a model path, a draft model): printable, not empty, and not starting with '-'
    (an engine would read it as a flag). Quoting for the shell and YAML happens where it is written."""
    if not isinstance(value, str) or not value.strip():
        raise InputError("expected a model id or path, got an empty one", file=file, field=field_name)
    if CONTROL.search(value) or any(c in value for c in "\n\t"):
        raise InputError("control characters in a model id or path", file=file, field=field_name)
    if value.startswith("-"):
        raise InputError(f"{printable(value, 40)!r} starts with '-': an engine would read it as an option "
                         "(give ./NAME for a local folder)", file=file, field=field_name)
    if len(value) > 4096:
        raise InputError("longer than 4096 characters; expected a model id or path", file=file, field=field_name)
    return value


def library_model(key: str):
    """The shipped model whose key is ``key`` (the plan records the key), or None."""
    from ..models import list_models

    k = key.strip().lower()
    for m in list_models():
        if m.key.lower() == k:
            return m
    return None


def hf_id(model) -> str | None:
    """The Hugging Face repository a library entry's dimensions come from (its ``source``), if it names one."""
    if model is None:
        return None
    hit = _HF_SOURCE.match(model.source or "")
    return hit.group(1) if hit else None


def resolve_model(plan: Plan, model_path: str | None) -> tuple[str, str, object | None]:
    """(model path, where it came from, library Model or None)."""
    model = library_model(plan.model_key)
    if model_path is not None:
        return user_text(model_path, "--model-path"), "--model-path", model
    repo = hf_id(model)
    if repo:
        return repo, f"the model library entry {model.key} (its source: {printable(model.source, 120)})", model
    why = ("its library entry names no Hugging Face repository" if model is not None
           else "it is not in the model library")
    return PLACEHOLDER_MODEL, (f"a placeholder: the plan's model {printable(plan.model_key, 60)} has no known "
                               f"checkpoint ({why}); replace {PLACEHOLDER_MODEL} in every file, or run deploy again "
                               "with --model-path"), model


def resolve_draft(target: Target) -> None:
    draft = target.layout.scenario.get("draft")
    if not draft:
        return
    m = library_model(draft)
    repo = hf_id(m)
    target.draft_path = user_text(repo or draft, "scenario.draft", file=target.plan.path)


def preset(engine: str) -> Engine:
    return ENGINES[engine]
