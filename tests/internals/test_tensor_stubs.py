"""The checked-in ``tensor.pyi`` shows type checkers exactly the Tensor that ``methods.py``
installs, and ``tensor.py`` stays the data model (Note: ``_tensor/tensor.py`` docstring)."""

from __future__ import annotations

import ast
import importlib.util
import pathlib

import pytest

import tensorplay as tp

ROOT = pathlib.Path(__file__).resolve().parents[2]
STUB = ROOT / "tensorplay" / "_tensor" / "tensor.pyi"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_tensor_stub",
                                                  ROOT / "tools" / "gen_tensor_stub.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stub_names() -> set[str]:
    tree = ast.parse(STUB.read_text())
    (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef)
              and node.name == "Tensor"]
    names = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
    return names


def test_every_runtime_method_is_in_the_stub_and_back():
    generator = _generator()
    runtime = generator.public_names(tp.Tensor) | generator.private_names(tp.Tensor)
    stub = _stub_names()
    assert {"add", "sum", "to", "copy_", "gelu", "__add__", "__matmul__", "shape"} <= runtime
    assert {"_data", "_ag", "_make", "_check_guard"} <= runtime   # the op modules read them
    assert not runtime - stub, f"missing from tensor.pyi: {sorted(runtime - stub)}"
    assert not stub - runtime, f"in tensor.pyi but not on Tensor: {sorted(stub - runtime)}"


def test_module_names_in_the_stub_are_the_runtime_module_names():
    from tensorplay._tensor import tensor

    tree = ast.parse(STUB.read_text())
    stub = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    runtime = set(_generator().module_names(tensor))
    assert {"Tensor", "Size", "layout_of", "_normalize_dim"} <= runtime
    assert stub == runtime
    assert all(callable(getattr(tensor, name)) for name in runtime)


def test_stub_is_what_the_generator_writes_now():
    assert STUB.read_text() == _generator().render(), \
        "tensor.pyi is stale: run python3 tools/gen_tensor_stub.py"


def test_stub_gives_signatures_and_return_types():
    text = STUB.read_text()
    assert "    def matmul(self, other: Any) -> Tensor: ..." in text
    assert "    def shape(self) -> tuple[builtins.int, ...]: ..." in text
    assert "    def item(self) -> builtins.int | builtins.float | builtins.bool | " \
           "builtins.complex: ..." in text


def test_package_is_marked_typed():
    assert (ROOT / "tensorplay" / "py.typed").is_file()
    assert 'tensorplay = ["py.typed", "**/*.pyi"]' in (ROOT / "pyproject.toml").read_text()


def test_tensor_py_imports_no_op_module():
    tree = ast.parse((ROOT / "tensorplay" / "_tensor" / "tensor.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.add(("." * node.level) + (node.module or ""))
            if node.level == 1 and node.module is None:
                imported |= {"." + alias.name for alias in node.names}
    assert not {name for name in imported if name.startswith(".") and
                not name.startswith("..")}, imported
    for node in ast.walk(tree):   # and no import hides inside a method
        if isinstance(node, ast.FunctionDef):
            assert not [n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_two_op_modules_cannot_define_one_method(monkeypatch):
    from tensorplay._tensor import methods, reductions, views

    assert "sum" in methods.method_owners()
    monkeypatch.setattr(views, "TENSOR_METHODS", views.TENSOR_METHODS + ("sum",))
    with pytest.raises(RuntimeError, match="Tensor.sum is defined by both "
                                           "tensorplay._tensor.reductions and "
                                           "tensorplay._tensor.views"):
        methods.method_owners()
    assert reductions.sum is not None
