"""The package's layering (ARCHITECTURE.md): five floors, one-way imports, no cycles.

Floors, bottom to top: the leaves (``_dtype _errors _philox _version``), ``backends``, ``_runtime``,
``_tensor``, ``accelerator``, ``compiler``, and the top (``bench``, ``__main__``, the package's
``__init__``). A module imports only its own floor or floors below. Imports inside a function
are allowed only for packages outside tensorplay (optional ones: cupy, torch, jax, matplotlib);
imports under ``if TYPE_CHECKING:`` are ignored (they never run).

Reads the source with ``ast``; imports nothing of tensorplay, so it runs on every build.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "tensorplay"

FLOORS = (
    ("leaves", ("tensorplay._dtype", "tensorplay._errors", "tensorplay._philox",
                "tensorplay._version")),
    ("backends", ("tensorplay.backends",)),
    ("_runtime", ("tensorplay._runtime",)),
    ("_tensor", ("tensorplay._tensor",)),
    ("accelerator", ("tensorplay.accelerator", "tensorplay.nn", "tensorplay.linalg",
                     "tensorplay.serialization", "tensorplay.autograd", "tensorplay.optim")),
    ("compiler", ("tensorplay.compiler",)),
    ("top", ("tensorplay.bench", "tensorplay.__main__", "tensorplay")),
)


def floor_of(module: str) -> int:
    """The floor number of a tensorplay module (longest matching prefix wins)."""
    best, best_len = None, -1
    for number, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = number, len(prefix)
    if best is None:
        raise AssertionError(f"{module} is on no floor: add it to FLOORS or move it")
    return best


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Yield (node, inside_function) for every import that can run."""
    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    yield from walk(other, in_function)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function
            yield from walk(child, in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
    yield from walk(tree, False)


def _targets(module: str, node) -> list[str]:
    """The tensorplay modules an import statement loads (the deepest existing one per name)."""
    is_package = MODULES[module].name == "__init__.py"
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        names = [f"{target}.{alias.name}" if f"{target}.{alias.name}" in MODULES else target
                 for alias in node.names]
    out = []
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name.startswith("tensorplay"):
            out.append(name)
    return out


def edges():
    """(importer, imported, line, inside_function) for every tensorplay-internal import."""
    for module, path in MODULES.items():
        for node, in_function in _imports(ast.parse(path.read_text(), str(path))):
            for target in _targets(module, node):
                if target != module:
                    yield module, target, node.lineno, in_function


EDGES = list(edges())


def test_every_module_is_on_a_floor():
    for module in MODULES:
        floor_of(module)


def test_no_module_imports_a_floor_above_its_own():
    upward = [f"{m} (floor {FLOORS[floor_of(m)][0]}) imports {t} (floor "
              f"{FLOORS[floor_of(t)][0]}) at line {line}"
              for m, t, line, _ in EDGES if floor_of(t) > floor_of(m)]
    assert not upward, "\n".join(upward)


def test_imports_inside_functions_are_only_for_outside_packages():
    inner = [f"{m}:{line} imports {t} inside a function" for m, t, line, inside in EDGES
             if inside]
    assert not inner, "\n".join(inner)


def test_no_import_cycles():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, target, _, _ in EDGES:
        graph[module].add(target)
    cycles = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def connect(node: str) -> None:   # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            connect(node)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("source, expected", [
    ("from .. import _dtype", ["tensorplay._dtype"]),
    ("from ..backends import sim", ["tensorplay.backends.sim"]),
    ("def f():\n    from .. import _tensor", ["tensorplay._tensor"]),
])
def test_the_checker_sees_imports(source, expected):
    """The walker itself: relative imports resolve, and function-level ones are seen."""
    found = [t for node, _ in _imports(ast.parse(source))
             for t in _targets("tensorplay._runtime.state", node)]
    assert found == expected
