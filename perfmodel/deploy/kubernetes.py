"""k8s.yaml: plain Kubernetes objects that run the same commands as the scripts, one pod per instance.

Aggregated: a Deployment per role (replicas: the plan's instances) behind a Service. Disaggregated: each role a
StatefulSet with a headless Service, so the router reaches every instance by a stable name
(``NAME-prefill-0.NAME-prefill``), and the router a Deployment behind a Service. The engine's YAML files go in a
ConfigMap mounted at /config; /dev/shm is a memory-backed volume (NCCL). Every key is checked against
``options/kubernetes.yaml``.
"""
from __future__ import annotations

import re

import yaml

from .options import checked_tree, table
from .target import POD_IP, Site, Target


# strings a YAML 1.1 reader (Kubernetes') takes for booleans; PyYAML quotes most but leaves y, Y, n, N bare
_BOOLISH = {"y", "Y", "n", "N", "yes", "Yes", "YES", "no", "No", "NO", "true", "True", "TRUE", "false", "False",
            "FALSE", "on", "On", "ON", "off", "Off", "OFF"}


class Dumper(yaml.SafeDumper):
    """yaml.safe_dump without anchors (each object written out whole), with YAML 1.1 booleans' words quoted and
    text of several lines as a literal block."""

    def ignore_aliases(self, data) -> bool:
        return True


def _str(dumper, data: str):
    if data in _BOOLISH:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="'")
    if "\n" in data:  # a file in a ConfigMap: as a literal block
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_str(data)


Dumper.add_representer(str, _str)


def dump(data, *, many: bool = False) -> str:
    if many:
        return yaml.dump_all(data, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=120)
    return yaml.dump(data, Dumper=Dumper, sort_keys=False, default_flow_style=None, width=120)


def object_name(model_key: str, engine: str) -> str:
    """A DNS-1035 label for the objects (letters, digits and '-', starting with a letter, at most 40 characters so
    that ``NAME-prefill-12`` still fits 63)."""
    s = re.sub(r"[^a-z0-9]+", "-", f"{model_key}-{engine}".lower()).strip("-")
    if not s or not s[0].isalpha():
        s = f"m-{s}".strip("-")
    return s[:40].rstrip("-")


def _env(argv) -> list[dict]:
    out = []
    for k, v in argv.env.items():
        if v == POD_IP:
            out.append({"name": k, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
        else:
            out.append({"name": k, "value": v})
    return out


def _pod(t: Target, site: Site, role: str, argv, gpus: int, image: str, labels: dict, configs: bool) -> dict:
    container = {"name": role, "image": image, "command": argv.words(),
                 "ports": [{"name": "http", "containerPort": site.port(role)}]}
    env = _env(argv)
    if env:
        container["env"] = env
    mounts = [{"name": "shm", "mountPath": "/dev/shm"}]
    volumes = [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
    if configs:
        mounts.append({"name": "config", "mountPath": site.config_dir})
        volumes.append({"name": "config", "configMap": {"name": f"{site.name}-config"}})
    if gpus:
        gpu = table("kubernetes")["gpu_resource"].get(t.vendor, "nvidia.com/gpu")
        container["resources"] = {"limits": {gpu: gpus}}
    container["volumeMounts"] = mounts
    return {"metadata": {"labels": dict(labels)}, "spec": {"containers": [container], "volumes": volumes}}


def manifest(t: Target, site: Site, commands: dict, configs: dict[str, str], image: str) -> str:
    """The manifest text: every object checked against the Kubernetes option table, then dumped by yaml.safe_dump
    (which quotes whatever user text needs it)."""
    docs = []
    name = site.name
    if configs:
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-config"},
                     "data": dict(configs)})
    roles = {r.name: r for r in t.roles()}
    disagg = t.layout.mode == "disaggregated"
    for role, argvs in commands.items():
        first = argvs[0]
        if any(a.words() != first.words() or a.env != first.env for a in argvs):
            raise ValueError(f"{role}: instances differ in a pod template")  # ports are per role on this site
        r = roles.get(role)
        labels = {"app": name, "role": role}
        obj_name = f"{name}-{role}"
        pod = _pod(t, site, role, first, r.gpus if r else 0, image, labels, bool(configs))
        count = r.count if r else 1
        if disagg and r is not None:
            docs.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": obj_name, "labels": labels},
                         "spec": {"clusterIP": "None", "selector": labels,
                                  "ports": [{"name": "http", "port": site.port(role), "targetPort": site.port(role)}]}})
            docs.append({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": obj_name, "labels": labels},
                         "spec": {"serviceName": obj_name, "replicas": count, "selector": {"matchLabels": labels},
                                  "template": pod}})
        else:
            docs.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": obj_name, "labels": labels},
                         "spec": {"selector": labels,
                                  "ports": [{"name": "http", "port": site.port(role), "targetPort": site.port(role)}]}})
            docs.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": obj_name, "labels": labels},
                         "spec": {"replicas": count, "selector": {"matchLabels": labels}, "template": pod}})
    kinds = table("kubernetes")["kinds"]
    for i, d in enumerate(docs):
        checked_tree(kinds[d["kind"]], d, f"k8s.yaml document {i + 1} ({d['kind']})")
    return dump(docs, many=True)
