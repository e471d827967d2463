"""``mypy`` is clean on the whole package ``tensorplay`` under the ``[tool.mypy]``
configuration of ``pyproject.toml`` (``check_untyped_defs``; no module excluded), and the
declarations that show type checkers what tensorplay installs at import (``functional.py``'s
``TYPE_CHECKING`` block here, ``tensor.pyi`` in ``test_tensor_stubs.py``) stay true to the runtime.

mypy runs in subprocesses without a cache (cold: about 6 s on two cores), so it checks the working
tree as it is; once, in the host-only configuration (``tests/run_suite.py`` runs it first).
Skipped where mypy is not installed (it is in the ``test`` extra).
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
CHECKED = "tensorplay"
#: checked on its own as well: everywhere else type checkers read ``tensor.pyi`` in its place
STUBBED = "tensorplay/_tensor/tensor.py"


def _mypy(*arguments: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", os.devnull, "--no-error-summary", "--hide-error-context", *arguments],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.skipif(os.environ.get("TENSORPLAY_ACCELERATOR", "").lower() not in ("none",),
                    reason="reads source only: checked once, in the host-only configuration")
def test_mypy_clean_on_the_package() -> None:
    pytest.importorskip("mypy")
    runs = {CHECKED: _mypy(CHECKED),   # the two run side by side
            STUBBED: _mypy("--follow-imports=silent", "--no-warn-unused-configs", STUBBED)}
    failures = []
    try:
        for what, process in runs.items():
            report, _ = process.communicate(timeout=300)
            if process.returncode != 0:
                failures.append(f"mypy found errors in {what}:\n{report.strip()}")
    finally:
        for process in runs.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    assert not failures, "\n".join(failures)


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
