"""The layering rules of docs/developing.md, read from the source with ``ast`` (nothing is imported):

(a) no import circle among module-level imports (and no circle through imports inside functions beyond the
    listed, reasoned ones);
(b) no host-side module (``perfmodel.fit`` and the model layers below it) imports torch, directly or through
    what it imports at module level;
(c) no module uses another module's private name (``from x import _name`` or ``x._name``);
(d) ``perfmodel.measure`` (torch-side) imports nothing of the model: only itself and the plain helpers in
    ``MEASURE_MAY_IMPORT``, so the suite runs under torchrun on a machine with nothing else of the package working.

Imports under ``if __name__ == "__main__":`` are not edges: a module run as a program sits above every layer.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "perfmodel"

# host-side layers: none of these may import torch, directly or through their module-level imports
HOST_SIDE = ("perfmodel.fit", "perfmodel.cost", "perfmodel.graph", "perfmodel.projection", "perfmodel.step_accounting",
             "perfmodel.capacity", "perfmodel.models", "perfmodel.spec", "perfmodel.profile", "perfmodel.ops",
             "perfmodel.energy", "perfmodel.measure.store")

# what perfmodel.measure may import from the rest of the package
MEASURE_MAY_IMPORT = ("perfmodel.io", "perfmodel.errors")

# circles that only imports inside functions close, each with why it stays (empty is the goal)
LAZY_CIRCLES_ALLOWED = {
    # the torch-side suite's planner (shapes: torch-free, run by `--plan` without torch) asks the training
    # family for its cases, and the kernels' registry dispatches to the layer and training families, which use
    # the kernels' helpers: one family registry inside measure/, never seen by a host-side module.
    # To remove: split measure/training.py into its torch-free plan and its torch runner.
    frozenset({"perfmodel.measure.kernels", "perfmodel.measure.layers", "perfmodel.measure.shapes",
               "perfmodel.measure.training"}),
}

# private names used across modules that could not be made public in time (module, name): reason
PRIVATE_ALLOWED: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for p in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


MODULES = _modules()


def _is_main_guard(node: ast.AST) -> bool:
    t = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(t, ast.Compare) and isinstance(t.left, ast.Name)
            and t.left.id == "__name__" and len(t.comparators) == 1 and isinstance(t.comparators[0], ast.Constant)
            and t.comparators[0].value == "__main__")


def _known(name: str) -> str | None:
    """The perfmodel module ``name`` is, or lies in (a name imported from a module is that module)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _scan(module: str):
    """(imports, privates): imports as (target, lazy, line), target a perfmodel module or "torch"; privates as
    (owner module, name, line) for every private name this module takes from another."""
    path, is_pkg = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    imports, privates, aliases = [], [], {}

    def base_of(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        parts = module.split(".")
        if not is_pkg:
            parts = parts[:-1]
        parts = parts[:len(parts) - (node.level - 1)]
        return ".".join(parts + ([node.module] if node.module else []))

    def add(target: str, lazy: bool, line: int) -> None:
        if target.split(".")[0] == "torch":
            imports.append(("torch", lazy, line))
            return
        known = _known(target)
        if known and known != module:
            imports.append((known, lazy, line))

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _is_main_guard(child):
                continue
            if isinstance(child, ast.Import):
                for a in child.names:
                    add(a.name, lazy, child.lineno)
                    if _known(a.name) == a.name:
                        aliases[a.asname or a.name] = a.name
            elif isinstance(child, ast.ImportFrom):
                base = base_of(child)
                for a in child.names:
                    full = f"{base}.{a.name}"
                    if full in MODULES:
                        add(full, lazy, child.lineno)
                        aliases[a.asname or a.name] = full
                    else:
                        add(base, lazy, child.lineno)
                        owner = _known(base)
                        if owner and owner != module and a.name.startswith("_") and not a.name.startswith("__"):
                            privates.append((owner, a.name, child.lineno))
            elif isinstance(child, ast.Attribute) and child.attr.startswith("_") and not child.attr.startswith("__"):
                v = child.value
                if isinstance(v, ast.Name) and v.id in aliases and aliases[v.id] != module:
                    privates.append((aliases[v.id], child.attr, child.lineno))
            visit(child, lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return imports, privates


SCANS = {m: _scan(m) for m in MODULES}


def _graph(with_lazy: bool) -> dict[str, set[str]]:
    return {m: {t for t, lazy, _ in SCANS[m][0] if t != "torch" and (with_lazy or not lazy)} for m in MODULES}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module, each as one circle through all of them."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def connect(v: str) -> None:
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def _path(graph: dict[str, set[str]], comp: list[str]) -> str:
    """One circle inside a component, written a -> b -> ... -> a."""
    members, start = set(comp), comp[0]
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    chain = [v]
                    while prev[chain[-1]] is not None:
                        chain.append(prev[chain[-1]])
                    return " -> ".join(list(reversed(chain)) + [start])
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return " <-> ".join(comp)


def test_no_circle_among_module_level_imports():
    g = _graph(with_lazy=False)
    circles = [_path(g, c) for c in _circles(g)]
    assert not circles, "import circles among module-level imports:\n  " + "\n  ".join(circles)


def test_no_new_circle_through_imports_inside_functions():
    g = _graph(with_lazy=True)
    circles = [_path(g, c) for c in _circles(g) if frozenset(c) not in LAZY_CIRCLES_ALLOWED]
    assert not circles, ("import circles closed by imports inside functions (move the shared piece down a layer):"
                         "\n  " + "\n  ".join(circles))


def _packages_of(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in MODULES]


def _loads_torch(module: str, seen: dict[str, list[str] | None]) -> list[str] | None:
    """The chain of module-level imports by which importing ``module`` loads torch, or None."""
    if module in seen:
        return seen[module]
    seen[module] = None  # a circle cannot load torch by itself
    targets = [t for t, lazy, _ in SCANS[module][0] if not lazy]
    for t in targets + _packages_of(module):
        if t == "torch":
            seen[module] = [module, "torch"]
            return seen[module]
        for dep in [t] + _packages_of(t):
            chain = _loads_torch(dep, seen)
            if chain:
                seen[module] = [module] + chain
                return seen[module]
    return None


def test_host_side_layers_never_import_torch():
    seen: dict = {}
    host = [m for m in MODULES if any(m == h or m.startswith(h + ".") for h in HOST_SIDE)]
    assert any(m.startswith("perfmodel.fit.") for m in host)
    bad = []
    for m in sorted(host):
        direct = [line for t, _, line in SCANS[m][0] if t == "torch"]
        if direct:
            bad.append(f"{m} imports torch (line {direct[0]})")
            continue
        chain = _loads_torch(m, seen)
        if chain:
            bad.append(" -> ".join(chain))
    assert not bad, "host-side modules that load torch:\n  " + "\n  ".join(bad)


def test_no_private_name_across_modules():
    used = [f"{m}:{line} uses {owner}.{name}" for m in sorted(MODULES) for owner, name, line in SCANS[m][1]
            if (owner, name) not in PRIVATE_ALLOWED]
    assert not used, "private names used across modules (make them public or move them):\n  " + "\n  ".join(used)


def test_measure_imports_nothing_of_the_model():
    bad = [f"{m}:{line} imports {t}" for m in sorted(MODULES) if m == "perfmodel.measure" or m.startswith("perfmodel.measure.")
           for t, _, line in SCANS[m][0]
           if t != "torch" and not t.startswith("perfmodel.measure") and t not in MEASURE_MAY_IMPORT]
    assert not bad, "perfmodel.measure importing the model (move the shared piece into measure/ or fit/):\n  " + \
        "\n  ".join(bad)


def test_the_scan_sees_what_it_checks():
    """Guards against a scan that silently finds nothing."""
    g = _graph(with_lazy=True)
    assert "perfmodel.fit.latency" in g["perfmodel.fit.directory"]
    assert any(t == "torch" for t, _, _ in SCANS["perfmodel.measure.timing"][0])
    assert _circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


# --- issue 28: one resolution point, host costs as calibration, engine facts in the presets -------------------

# the modules that may resolve a scenario for a part: the definition, and the one place inputs are resolved
RESOLVES = ("perfmodel.scenario", "perfmodel.resolve")
# the engine keys a preset fact would be written against
ENGINE_KEYS = ("trtllm", "vllm", "sglang", "torch", "hf")
# modules that may compare an engine with a key, each with why it is not an engine preset's fact
ENGINE_COMPARE_ALLOWED = {
    # "torch" there names the stack a profile's rows were measured with (this project's suite), not the preset:
    # an imported engine's profile names its tables' folder
    "perfmodel.profile": "a profile's measuring stack, not a preset",
}


def _tree(module: str) -> ast.AST:
    path, _ = MODULES[module]
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def test_a_scenario_is_resolved_for_a_part_in_one_place():
    calls = [f"{m}:{n.lineno}" for m in sorted(MODULES) if m not in RESOLVES for n in ast.walk(_tree(m))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "for_hardware"]
    assert not calls, ("Scenario.for_hardware called outside perfmodel.resolve (use resolve.setup or "
                       "resolve.resolve_scenario):\n  " + "\n  ".join(calls))
    in_resolve = [n for n in ast.walk(_tree("perfmodel.resolve")) if isinstance(n, ast.Call)
                  and isinstance(n.func, ast.Attribute) and n.func.attr == "for_hardware"]
    assert len(in_resolve) == 1  # the scan sees the one call


def test_host_costs_read_no_calibration_folder_of_their_own():
    """The host costs reach the model as a profile family (perfmodel.fit.host, evidence.compose): host_costs.py
    neither finds calibration folders (perfmodel.paths) nor reads the environment."""
    imports = {t for t, _, _ in SCANS["perfmodel.host_costs"][0]}
    assert "perfmodel.paths" not in imports and "perfmodel.resolve" not in imports
    tree = _tree("perfmodel.host_costs")
    env = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in ("environ", "getenv")]
    names = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "calibration_dir"]
    assert not env and not names, f"perfmodel/host_costs.py reads the environment or calibration/ (lines {env + names})"


def _is_engine(x: ast.AST) -> bool:
    return ((isinstance(x, ast.Attribute) and x.attr == "engine") or (isinstance(x, ast.Name) and x.id == "engine")
            or (isinstance(x, ast.Attribute) and x.attr == "key" and isinstance(x.value, ast.Name)
                and x.value.id in ("eng", "engine")))


def _is_engine_key(x: ast.AST) -> bool:
    elts = x.elts if isinstance(x, (ast.Tuple, ast.Set, ast.List)) else [x]
    return any(isinstance(e, ast.Constant) and e.value in ENGINE_KEYS for e in elts)


def test_engine_facts_live_in_the_presets():
    """No module but perfmodel.engines decides by an engine's key (``sc.engine == "trtllm"``) or keeps a table of
    engines (nearness, serving engines): such a fact is a field of the preset. Launch-file writers (deploy/),
    the torch-side suite (measure/) and the importers of an engine's own tables (imports/) are about one engine
    each."""
    skip = ("perfmodel.engines", "perfmodel.deploy", "perfmodel.measure", "perfmodel.imports")
    bad = []
    for m in sorted(MODULES):
        if any(m == s or m.startswith(s + ".") for s in skip) or m in ENGINE_COMPARE_ALLOWED:
            continue
        for n in ast.walk(_tree(m)):
            if isinstance(n, ast.Compare):
                sides = [n.left, *n.comparators]
                if any(_is_engine(s) for s in sides) and any(_is_engine_key(s) for s in sides):
                    bad.append(f"{m}:{n.lineno} {ast.unparse(n)[:60]}")
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("ENGINE_NEAR", "SERVING_ENGINES")
                                                 for t in n.targets):
                bad.append(f"{m}:{n.lineno} defines an engine table")
    assert not bad, "engine facts outside perfmodel/engines.py (make them preset fields):\n  " + "\n  ".join(bad)


def test_the_engine_scan_sees_what_it_checks():
    tree = ast.parse('if sc.engine == "trtllm": pass\nx = eng.key in ("hf", "torch")')
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)
             and any(_is_engine(s) for s in [n.left, *n.comparators])
             and any(_is_engine_key(s) for s in [n.left, *n.comparators])]
    assert len(found) == 2
