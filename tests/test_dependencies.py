"""The layout's import rules: which top-level package may import which, and no import cycle between modules.

Every module of the project is parsed with `ast` (imports at any scope: a function-level import is still an
edge, and still closes a cycle). The pod ships `training/` alone, so it imports nothing of ours; the planner
runs at synth and on a laptop; the GPU benchmarks only on a GPU machine, and nothing else imports them.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("training", "planning", "benchmarks", "cdk_constructs", "stacks", "tools", "app")

# What each package (or one module, beyond its package) may import besides itself: a package, or one module of one.
ALLOWED: dict[str, frozenset[str]] = {
    "training": frozenset(),
    # The planner reads the trainer's option vocabulary and command line, the GPU datasheets and its families, nothing
    # that trains...
    "planning": frozenset({"training.config", "training.command_line", "training.gpus", "training.families"}),
    # ...but for its CLI, which starts the trainer once auto is resolved.
    "planning.train": frozenset({"training"}),
    "benchmarks": frozenset({"training", "planning"}),
    "cdk_constructs": frozenset({"planning"}),
    # The worker pods' preStop hook runs the trainer's own module, with its margin (one source for both).
    "cdk_constructs.ray_manifests": frozenset({"training.preemption"}),
    "stacks": frozenset({"cdk_constructs", "planning", "training"}),
    "tools": frozenset(set(PACKAGES) - {"tools", "benchmarks"}),
    "app": frozenset({"stacks", "cdk_constructs"}),
}

def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        paths = [root / f"{package}.py"] if (root / f"{package}.py").is_file() else sorted((root / package).rglob("*.py"))
        found |= {module_name(p, root): p for p in paths}
    return found


def imports_of(source: str, name: str, modules: set[str]) -> set[str]:
    """The project modules a module imports, at any scope: `from p import m` names module p.m where there is
    one, else p; a relative import is resolved against the module's package."""
    package = name.rsplit(".", 1)[0] if "." in name else ""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            # `import training.model` or `from training.model import x`: the longest project module named
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    modules = project_modules(root, packages)
    return {name: imports_of(path.read_text(), name, set(modules)) for name, path in modules.items()}


def package_of(module: str) -> str:
    return module.split(".")[0]


def forbidden_edges(graph: dict[str, set[str]], allowed: dict[str, frozenset[str]] = ALLOWED) -> list[str]:
    """'module -> module' for every import across packages that the rules do not allow."""
    bad = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            src, dst = package_of(source), package_of(target)
            rules = allowed[src] | allowed.get(source, frozenset())
            ok = src == dst or dst in rules or any(target == m or target.startswith(m + ".") for m in rules)
            if not ok:
                bad.append(f"{source} -> {target}")
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted: modules that import
    each other, directly or through others."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


# ---------------------------------------------------------------- the project as it is


def test_packages_import_only_what_the_layout_allows():
    assert forbidden_edges(import_graph(ROOT)) == []


def test_no_module_imports_itself_back_through_others():
    assert cycles(import_graph(ROOT)) == []


def test_nothing_imports_the_benchmarks():
    graph = import_graph(ROOT)
    assert sorted(s for s, targets in graph.items() if package_of(s) != "benchmarks"
                  and any(package_of(t) == "benchmarks" for t in targets)) == []


# ---------------------------------------------------------------- the checks themselves, on made-up graphs


def test_an_added_edge_from_the_trainer_to_the_planner_fails():
    graph = {"training.step": {"training.loss", "planning.timing"}, "training.loss": set(), "planning.timing": set()}
    assert forbidden_edges(graph) == ["training.step -> planning.timing"]


def test_only_the_planners_cli_may_start_the_trainer():
    graph = {"planning.train": {"training.train"}, "planning.search": {"training.train"}, "training.train": set()}
    assert forbidden_edges(graph) == ["planning.search -> training.train"]


def test_the_planner_may_read_the_trainer_config_but_not_its_model():
    graph = {"planning.memory": {"training.config", "training.model"}, "training.config": set(), "training.model": set()}
    assert forbidden_edges(graph) == ["planning.memory -> training.model"]


def test_a_cycle_through_three_modules_is_found_and_a_chain_is_not():
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}, "b.p": {"b.q"}, "b.q": set()}
    assert cycles(graph) == [["a.x", "a.y", "a.z"]]


def test_a_function_level_import_closes_a_cycle(tmp_path):
    """export imports train at the top, train imports export inside a function: still a cycle."""
    package = tmp_path / "training"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "export.py").write_text("from training.train import storage_uri\n")
    (package / "train.py").write_text("def storage_uri():\n    from training import export\n    return export\n")
    assert cycles(import_graph(tmp_path, ("training",))) == [["training.export", "training.train"]]


def test_imports_in_every_form_name_the_module_they_reach(tmp_path):
    package = tmp_path / "training"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__.py", "a.py", "b.py", "c.py", "sub/__init__.py", "sub/d.py"):
        (package / name).write_text("")
    source = ("import training.a\nfrom training import b\nfrom training.c import thing\nfrom .sub import d\n"
              "import os\nfrom training import not_a_module\n")
    (package / "e.py").write_text(source)
    graph = import_graph(tmp_path, ("training",))
    assert graph["training.e"] == {"training.a", "training.b", "training.c", "training.sub.d", "training"}
