"""The house's layers (docs/architecture.md): every import inside conveyor/ goes down the table or
stays in its layer, and the top-level packages of one layer import each other without a loop.
Relative and function-local imports count like the others."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "conveyor"

#: Bottom to top: a module may import from its own layer and the ones above it in this list.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("foundation", frozenset({"conveyor", "errors", "limits", "gctune", "kafka_logs", "files"})),
    ("platform model", frozenset({"config"})),
    ("clients and plumbing", frozenset({"jars", "java_client", "kafka", "kafka_tools", "tls", "auth", "service",
                                        "positions", "edge_guard", "edge_ports"})),
    ("parts", frozenset({"topics", "bus", "gateway", "replicate", "dispatch", "pipeline", "acls", "ops", "verify", "web",
                         "registrar", "deploy"})),
    ("local runtime", frozenset({"runtime"})),
    ("command line", frozenset({"cli", "__main__"})),
)


def _unit(module: str) -> str:
    """The top-level module or package of ``conveyor.<unit>...`` (``conveyor`` for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _layer(unit: str) -> int:
    for index, (_, units) in enumerate(LAYERS):
        if unit in units:
            return index
    raise AssertionError(f"conveyor.{unit} is in no layer: add it to LAYERS in {Path(__file__).name}")


def _module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def _imports(source: str, package: str) -> Iterator[tuple[int, str]]:
    """(line, module) of every import of a conveyor module in ``source``, a module of ``package``,
    relative ones resolved."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                names = [".".join([*base, node.module] if node.module else base)]
            else:
                names = [node.module or ""]
            if names == ["conveyor"]:  # `from conveyor import kafka` imports conveyor.kafka
                names = [f"conveyor.{alias.name}" for alias in node.names]
        else:
            continue
        yield from ((node.lineno, name) for name in names if name == "conveyor" or name.startswith("conveyor."))


def _edges() -> Iterator[tuple[str, int, str]]:
    """(where, its layer, the module imported) for every import inside conveyor/."""
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for line, imported in _imports(path.read_text(encoding="utf-8"), package):
            yield f"{module}:{line}", _layer(_unit(module)), imported


def test_no_import_runs_up_the_layers():
    upward = [f"{where} imports {imported} ({LAYERS[_layer(_unit(imported))][0]}, above {LAYERS[layer][0]})"
              for where, layer, imported in _edges() if _layer(_unit(imported)) > layer]
    assert upward == []


def test_the_packages_of_one_layer_import_each_other_without_a_loop():
    graph: dict[str, set[str]] = {}
    for where, _, imported in _edges():
        source, target = _unit(where.partition(":")[0]), _unit(imported)
        if source != target and _layer(source) == _layer(target):
            graph.setdefault(source, set()).add(target)

    def loop_from(unit: str, trail: tuple[str, ...]) -> tuple[str, ...] | None:
        if unit in trail:
            return (*trail[trail.index(unit):], unit)
        return next((found for nxt in sorted(graph.get(unit, ())) if (found := loop_from(nxt, (*trail, unit)))), None)

    loops = {" -> ".join(found) for unit in sorted(graph) if (found := loop_from(unit, ()))}
    assert loops == set()


def test_the_walk_resolves_relative_function_local_and_from_package_imports():
    source = ("from . import scrape\nfrom ..config import Platform\nimport conveyor.tls\n"
              "def serve():\n    from conveyor import kafka, runtime\n")
    assert [name for _, name in _imports(source, "conveyor.ops")] == [
        "conveyor.ops", "conveyor.config", "conveyor.tls", "conveyor.kafka", "conveyor.runtime"]
