"""The package's parts import each other without cycles; rl/ never reaches up to the agents.

Every ``import`` statement of every module counts, also the ones inside functions (a lazy import
is still a dependency) and under ``TYPE_CHECKING``. Modules are grouped into parts: the subpackages
below and ``core`` (the modules directly in ``agentbench_poad``).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

import pytest

PARTS = ("models", "rl", "sandbox", "environments", "baselines", "leaderboard", "cli")


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations, name
    return Path(next(iter(spec.submodule_search_locations)))


def _modules() -> dict[str, Path]:
    """Module name -> file, for every module of the installed package (editable or not)."""
    modules = {}
    roots = {"agentbench_poad": _package_dir("agentbench_poad")}
    roots.update({f"agentbench_poad.{p}": _package_dir(f"agentbench_poad.{p}") for p in PARTS})
    for package, root in roots.items():
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if package == "agentbench_poad" and parts and parts[0] in PARTS:
                continue  # listed under its own root (rl, sandbox, cli live inside the core dir)
            modules[".".join([package, *parts])] = path
    return modules


def _imports(name: str, path: Path) -> set[str]:
    """Absolute names of the agentbench_poad modules that ``name`` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {m for m in found if m == "agentbench_poad" or m.startswith("agentbench_poad.")}


def part_of(module: str) -> str:
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 and pieces[1] in PARTS else "core"


def part_graph() -> dict[str, set[str]]:
    """Part -> the other parts its modules import."""
    modules = _modules()
    graph: dict[str, set[str]] = {p: set() for p in (*PARTS, "core")}
    for name, path in modules.items():
        for target in _imports(name, path):
            if target not in modules and target.rpartition(".")[0] in modules:
                target = target.rpartition(".")[0]  # `from package import name`
            if target in modules and part_of(target) != part_of(name):
                graph[part_of(name)].add(part_of(target))
    return graph


def _cycle(graph: dict[str, set[str]], nodes: set[str]) -> list[str] | None:
    """A cycle among ``nodes`` (as a path), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node] & nodes):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(nodes):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_graph_sees_the_imports_it_should():
    """The walker is not blind: edges that exist by design are found."""
    graph = part_graph()
    assert "rl" in graph["baselines"]  # the agents subclass rl's PPOAgent
    assert "leaderboard" in graph["cli"] and "baselines" in graph["cli"]
    assert "models" in graph["rl"]  # the policy loads its model through models/
    assert _cycle({"a": {"b"}, "b": {"a"}}, {"a", "b"}) == ["a", "b", "a"]
    assert _cycle({"a": {"b"}, "b": set()}, {"a", "b"}) is None


def test_no_cycle_among_the_parts():
    graph = part_graph()
    cycle = _cycle(graph, set(PARTS))
    assert cycle is None, f"import cycle between parts: {' -> '.join(cycle)}"


@pytest.mark.parametrize("forbidden", ["baselines", "leaderboard", "cli"])
def test_rl_does_not_import_the_agents_the_board_or_the_cli(forbidden):
    assert forbidden not in part_graph()["rl"], (
        f"rl/ imports {forbidden}; pass objects in instead (e.g. train() takes the algorithm class)"
    )


def test_nothing_but_the_cli_imports_the_cli():
    graph = part_graph()
    importers = sorted(p for p, targets in graph.items() if "cli" in targets and p != "cli")
    assert importers == [], f"{importers} import agentbench_poad.cli"


@pytest.mark.parametrize(
    "forbidden", ["rl", "sandbox", "environments", "baselines", "leaderboard", "cli"]
)
def test_models_sit_below_rl(forbidden):
    """models/ (named models, fetching, conversion, cache) learns nothing: it imports none of the
    parts above it, so rl/ and everything else may build on it."""
    assert forbidden not in part_graph()["models"], (
        f"models/ imports {forbidden}; model acquisition must not depend on it"
    )


def module_graph() -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (a module's own package ``__init__``
    left out: Python imports it before the module anyway, so that edge orders nothing)."""
    return {name: set(targets) for name, targets in _module_graph().items()}


@functools.cache
def _module_graph() -> dict[str, frozenset[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {n: set() for n in modules}
    for name, path in modules.items():
        for target in _imports(name, path):
            if target not in modules and target.rpartition(".")[0] in modules:
                target = target.rpartition(".")[0]  # `from package import name`
            if target in modules and target != name and not name.startswith(target + "."):
                graph[name].add(target)
    return {name: frozenset(targets) for name, targets in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Every set of modules that import each other round a circle (the strongly connected
    components with more than one module; Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            nxt = next(targets, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


#: Circles that exist today, by part, each to be broken (then removed here: the test fails
#: while a listed circle is gone, so this list only shrinks). Nothing may join it.
KNOWN_CYCLES: dict[str, set[frozenset[str]]] = {}


def test_the_module_graph_sees_a_circle_inside_a_package():
    """The walker is not blind inside a package either: a circle of three, a self-contained
    tail and two separate circles are each found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    assert sorted(map(sorted, cycles(graph))) == [["a", "b", "c"], ["e", "f"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    # The real graph has the edges of a known circle, lazy and TYPE_CHECKING imports included.
    real = module_graph()
    assert "agentbench_poad.rl.policy_types" in real["agentbench_poad.rl.policy"]
    assert "agentbench_poad.rl.ppo_loop" in real["agentbench_poad.rl.trainer"]  # a lazy import


@pytest.mark.parametrize("part", [*PARTS, "core"])
def test_no_cycle_between_modules_of_a_part(part):
    """Inside each part (rl/, models/, ...), modules import each other one way only: e.g. the
    policy imports ``llm_agent``, which is typed against a Protocol instead of the policy."""
    graph = {n: t for n, t in module_graph().items() if part_of(n) == part}
    graph = {n: {t for t in targets if t in graph} for n, targets in graph.items()}
    found = set(cycles(graph))
    known = KNOWN_CYCLES.get(part, set())
    new = [" <-> ".join(sorted(c)) for c in found - known]
    assert not new, f"import cycle inside {part}: {new}; type against a Protocol or move a name"
    gone = [" <-> ".join(sorted(c)) for c in known - found]
    assert not gone, f"{gone} no longer a cycle: remove it from KNOWN_CYCLES"


def test_the_policy_and_its_agent_do_not_import_each_other():
    """The old circle rl/policy.py <-> rl/llm_agent.py stays broken; its re-export warns."""
    graph = module_graph()
    assert "agentbench_poad.rl.policy" not in graph["agentbench_poad.rl.llm_agent"]
    import agentbench_poad.rl.llm_agent as llm_agent
    import agentbench_poad.rl.policy as policy

    with pytest.warns(DeprecationWarning, match="agentbench_poad.rl.llm_agent import LLMAgent"):
        moved = policy.LLMAgent
    assert moved is llm_agent.LLMAgent
    with pytest.raises(AttributeError):
        policy.NoSuchName  # noqa: B018
