"""Arrows point one way: no module of fireline imports, however indirectly, one that
imports it back. Every import counts, at module level, inside a function or under
TYPE_CHECKING: a cycle hidden in a function is still two modules that need each other.

And they point down: the domain at the bottom, the ports on it, adapters and services
each on the ports, never on each other (a service reaches an adapter only through a
port, which wiring fills)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "functions" / "fireline"


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module of the package and the package's modules it imports."""
    paths = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = here[: len(here) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    child = f"{base}.{alias.name}"
                    # "from package import module" imports the module; else the name
                    # comes from the module itself
                    targets.add(child if child in paths else base)
        graph[name] = {t for t in targets if t in paths and t != name}
    return graph


# The layers each layer may import: itself and the ones below it. The layers above
# (api, handlers, local, cli, sim, wiring) compose these and are not held to an order here.
BELOW = {
    "domain": {"domain"},
    "ports": {"ports", "domain"},
    "adapters": {"adapters", "ports", "domain"},
    "services": {"services", "ports", "domain"},
}


def layer_of(module: str) -> str:
    """fireline.services.worker.intake -> services; fireline.ports -> ports."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Each import of a module of a held layer that reaches outside what it may import."""
    return sorted(
        (module, target)
        for module, targets in graph.items()
        if layer_of(module) in BELOW
        for target in targets
        if layer_of(target) not in BELOW[layer_of(module)]
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
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
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_of_fireline_is_in_an_import_cycle() -> None:
    # GIVEN every import of every module of the package
    graph = import_graph()
    assert len(graph) > 100  # the whole package was read
    # THEN no group of modules imports itself round
    assert cycles(graph) == []


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    # GIVEN two modules, one importing the other at the top and the other importing it
    # back inside a function
    root = tmp_path / "fireline"
    (root / "services").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "services" / "__init__.py").write_text("")
    (root / "services" / "a.py").write_text("from fireline.services import b\n")
    (root / "services" / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    (root / "services" / "c.py").write_text("import fireline.services.a\n")
    # WHEN the graph is read THEN the cycle is found, and the module outside it is not in it
    assert cycles(import_graph(root)) == [["fireline.services.a", "fireline.services.b"]]


def test_each_layer_imports_only_itself_and_the_layers_below_it() -> None:
    # GIVEN every import of every module of the package, each of the held layers present
    graph = import_graph()
    assert {layer_of(module) for module in graph} >= set(BELOW)
    # THEN no domain, port, adapter or service module imports a layer it stands on
    assert upward_imports(graph) == []


def test_a_service_importing_an_adapter_is_found(tmp_path: Path) -> None:
    # GIVEN a service that imports an adapter inside a function, beside one that goes
    # through the port, and an adapter on the port
    root = tmp_path / "fireline"
    for package in ("services", "adapters", "domain"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "ports.py").write_text("from fireline.domain import model\n")
    (root / "domain" / "model.py").write_text("")
    (root / "adapters" / "memory.py").write_text("from fireline import ports\n")
    (root / "services" / "good.py").write_text("from fireline import ports\n")
    (root / "services" / "bad.py").write_text(
        "def f():\n    from fireline.adapters import memory\n    return memory\n"
    )
    # WHEN the graph is read THEN the one upward import is found, and only it
    assert upward_imports(import_graph(root)) == [
        ("fireline.services.bad", "fireline.adapters.memory")
    ]
