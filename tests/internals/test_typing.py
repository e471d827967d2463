"""``mypy`` is clean on the native floor and the runtime (``tensorplay/backends``,
``tensorplay/_runtime``), under the ``[tool.mypy]`` configuration of ``pyproject.toml``
(``check_untyped_defs`` there; the floors above are read but not yet held to it).

Runs mypy in a subprocess without a cache (a cold run takes a few seconds), so it checks the
working tree as it is. Skipped where mypy is not installed (it is in the ``test`` extra).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("tensorplay/_runtime", "tensorplay/backends")


@pytest.mark.skipif(os.environ.get("TENSORPLAY_ACCELERATOR", "").lower() not in ("none",),
                    reason="reads source only: checked once, in the host-only configuration")
def test_mypy_clean_on_runtime_and_backends() -> None:
    pytest.importorskip("mypy")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", "/dev/null", "--no-error-summary", "--hide-error-context", *CHECKED],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    report = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, f"mypy found errors in {', '.join(CHECKED)}:\n{report}"


FUNCTIONAL = ROOT / "tensorplay" / "_tensor" / "functional.py"


def _type_checking_block(tree: ast.Module) -> ast.If:
    (block,) = [node for node in tree.body if isinstance(node, ast.If)
                and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"]
    return block


def test_functional_declarations_are_the_runtime_table() -> None:
    """``functional.py`` declares the names its ``_build`` installs in a ``TYPE_CHECKING``
    block (type checkers cannot run the table): exactly ``__all__``, each from where the
    runtime takes it, so the declarations cannot drift from the runtime namespace."""
    from tensorplay._tensor import elementwise, functional

    tree = ast.parse(FUNCTIONAL.read_text())
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    imported: dict[str, str] = {}
    kinds: dict[str, str] = {}
    aliases: dict[str, str] = {}
    literal_all: list[str] = []
    for node in _type_checking_block(tree).body:
        if isinstance(node, ast.ImportFrom):
            imported.update({alias.asname or alias.name: node.module or ""
                             for alias in node.names})
        elif isinstance(node, ast.AnnAssign):
            assert isinstance(node.target, ast.Name) and isinstance(node.annotation, ast.Name)
            kinds[node.target.id] = node.annotation.id
        elif isinstance(node, ast.Assign):
            (target,) = node.targets
            assert isinstance(target, ast.Name)
            if target.id == "__all__":
                literal_all = ast.literal_eval(node.value)
            else:
                assert isinstance(node.value, ast.Name)
                aliases[target.id] = node.value.id
    runtime = list(functional.__all__)
    assert literal_all == runtime, "functional.py's TYPE_CHECKING __all__ is not the runtime's"
    declared = set(imported) | set(kinds) | set(aliases)
    assert not declared - set(runtime), f"declared but not exported: {declared - set(runtime)}"
    assert not set(runtime) - declared - defined, \
        f"exported but not declared for type checkers: {sorted(set(runtime) - declared - defined)}"
    assert not declared & defined, f"declared twice: {declared & defined}"
    for name, module in imported.items():   # the same function (under autograd's wrapper)
        source = importlib.import_module(f"tensorplay._tensor.{module}")
        assert inspect.unwrap(getattr(functional, name)) is \
            inspect.unwrap(getattr(source, name)), f"{name} is not {module}.{name}"
    unary, binary = set(elementwise._UNARY), set(elementwise._BINARY) | set(elementwise._COMPARE)
    for name, kind in kinds.items():
        op = functional._ALIASES.get(name, name)
        assert op in {"_Unary": unary, "_Binary": binary}[kind], f"{name}: {kind}"
        assert op not in defined, f"{name}: {op} has a def of its own"
    for name, target in aliases.items():
        assert functional._ALIASES[name] == target
        assert inspect.unwrap(getattr(functional, name)) is \
            inspect.unwrap(getattr(functional, target))
