"""The documentation site (``docs/``): every public name is in the API reference, and the code
of the guides runs as written. The build itself (``sphinx-build -W --keep-going -n``, which
fails on a broken cross-reference or a public object without a docstring) is one step of
``tests/run_suite.py``."""

import glob
import importlib
import inspect
import os
import pkgutil
import re
import textwrap
import types

import pytest

import tensorplay as tp
from support import once_per_suite, requires_accelerator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")

#: public modules whose ``__all__`` (or, for ``tensorplay`` itself, whose namespace) is the
#: API; each is documented by an ``automodule`` (``tensorplay`` by its pages' entries)
MODULES = ["tensorplay", "tensorplay.accelerator", "tensorplay.accelerator.graphs",
           "tensorplay.accelerator.memory", "tensorplay.accelerator.random",
           "tensorplay.autograd", "tensorplay.compiler", "tensorplay.compiler.backends.cudagraphs",
           "tensorplay.linalg", "tensorplay.nn", "tensorplay.nn.functional", "tensorplay.nn.init",
           "tensorplay.nn.utils", "tensorplay.optim", "tensorplay.serialization",
           "tensorplay.backends"]
#: public-looking subpackages that are not API, with the reason
NOT_API = {"tensorplay.bench": "the benchmark suite behind `python -m tensorplay bench`; "
                               "docs/performance.rst shows its results"}
_DIRECTIVE = re.compile(r"^\.\. (?:auto|py:)(\w+):: *(\S+)", re.MULTILINE)
_CURRENT = re.compile(r"^\.\. (?:currentmodule|automodule|py:module):: *(\S+)", re.MULTILINE)
#: an automodule that documents every name of its module's ``__all__``
_ALL_MEMBERS = re.compile(r"^\.\. automodule:: *(\S+)\n(?:   :[\w-]+:.*\n)*   :members: *\n",
                          re.MULTILINE)


def _lookup(path: str):
    """The object a dotted path names, or None."""
    try:
        return pkgutil.resolve_name(path)
    except (ImportError, AttributeError, ValueError):
        return None


def _public_names(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    if module_name == "tensorplay":
        names = [n for n in dir(module) if not n.startswith("_")]
    else:
        names = list(getattr(module, "__all__", None) or
                     [n for n, v in vars(module).items() if inspect.isclass(v)
                      and v.__module__ == module_name and not n.startswith("_")])
    return [n for n in names if not isinstance(getattr(module, n), types.ModuleType)]


def _documented() -> tuple[dict[str, str], set[str]]:
    """``{full name: directive}`` of every object the reference pages describe, and the modules
    they document with ``automodule``."""
    names, modules = {}, set()
    for path in sorted(glob.glob(os.path.join(DOCS, "**", "*.rst"), recursive=True)):
        with open(path) as handle:
            text = handle.read()
        events = sorted([(m.start(), "module", m.group(1)) for m in _CURRENT.finditer(text)] +
                        [(m.start(), m.group(1), m.group(2)) for m in _DIRECTIVE.finditer(text)])
        for match in _ALL_MEMBERS.finditer(text):
            module = importlib.import_module(match.group(1))
            names.update({f"{match.group(1)}.{n}": "member" for n in module.__all__})
        current = None
        for _, kind, name in events:
            if kind == "module":
                current = name
                if text.find(f".. automodule:: {name}") >= 0:
                    modules.add(name)
                continue
            full = name if name.startswith("tensorplay") or current is None else \
                f"{current}.{name}"
            names[full] = kind
    return names, modules


def _tensor_tables() -> set[str]:
    with open(os.path.join(DOCS, "api", "tensor.rst")) as handle:
        return set(re.findall(r"^   Tensor\.(\w+)$", handle.read(), re.MULTILINE))


@once_per_suite
def test_every_public_name_is_in_the_reference():
    documented, modules = _documented()
    objects = {}
    for name in documented:
        obj = _lookup(name)
        if obj is not None:
            objects.setdefault(id(obj), name)
    missing = []
    for module_name in MODULES:
        if module_name != "tensorplay" and module_name not in modules:
            missing.append(f"{module_name} (an automodule entry)")
        module = importlib.import_module(module_name)
        for name in _public_names(module_name):
            full = f"{module_name}.{name}"
            if full in documented:
                continue
            # a re-export (tensorplay.accelerator.memory.empty_cache is
            # tensorplay.accelerator.empty_cache): its module's page says so, the object is
            # documented under its other name
            if module_name in modules and id(getattr(module, name)) in objects:
                continue
            missing.append(full)
    submodules = [f"tensorplay.{info.name}" for info in pkgutil.iter_modules(tp.__path__)
                  if not info.name.startswith("_")]
    missing += [m for m in submodules if m not in modules and m not in NOT_API]
    assert not missing, ("public names missing from the reference (docs/**/*.rst): "
                         + ", ".join(missing))


@once_per_suite
def test_every_tensor_method_is_in_a_table_of_the_tensor_page():
    public = {n for n in dir(tp.Tensor) if not n.startswith("_")}
    listed = _tensor_tables()
    assert not public - listed, ("Tensor attributes missing from the tables of "
                                 f"docs/api/tensor.rst: {sorted(public - listed)}")
    assert not listed - public, f"docs/api/tensor.rst lists what Tensor lacks: {listed - public}"


@once_per_suite
def test_getting_started_gives_the_readme_commands():
    with open(os.path.join(ROOT, "README.md")) as handle:
        readme = handle.read()
    with open(os.path.join(DOCS, "getting-started.rst")) as handle:
        page = handle.read()
    for heading in ("Run the demo", "Run the tests"):
        command = re.search(r"^```\n(.*?)\n^```", readme[readme.index(heading):],
                            re.DOTALL | re.MULTILINE).group(1)
        assert f"   {command}\n" in page, f"docs/getting-started.rst lacks {command!r}"


def _python_blocks(path: str) -> list[str]:
    """The ``.. code-block:: python`` blocks of an rst page (also those nested in a list),
    dedented, in order."""
    with open(path) as handle:
        lines = handle.read().split("\n")
    blocks, index = [], 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if line.strip() != ".. code-block:: python":
            continue
        indent = len(line) - len(line.lstrip())
        body = []
        while index < len(lines) and (not lines[index].strip() or
                                      len(lines[index]) - len(lines[index].lstrip()) > indent):
            body.append(lines[index])
            index += 1
        while body and body[0].lstrip().startswith(":"):    # the directive's options
            body.pop(0)
        blocks.append(textwrap.dedent("\n".join(body)).strip() + "\n")
    return blocks


GUIDES = sorted(glob.glob(os.path.join(DOCS, "guides", "*.rst")))
#: guides whose code shows what only the simulated accelerator does, with the reason
SIM_ONLY = {"simulator.rst": "shows sim's lazy streams (a race that sim makes deterministic) "
                             "and its 1 GiB devices"}


@requires_accelerator
@pytest.mark.parametrize("path", GUIDES, ids=[os.path.basename(p) for p in GUIDES])
def test_guide_code_runs_as_written(path, capsys):
    """Each guide's python blocks run in order, in one namespace, on the accelerator (the
    guides are written for ``TENSORPLAY_ACCELERATOR=sim``); their own asserts check results."""
    reason = SIM_ONLY.get(os.path.basename(path))
    if reason and tp.accelerator.current_accelerator().type != "sim":
        pytest.skip(f"runs on sim only: it {reason}")
    namespace = {"__name__": "guide"}
    tp.manual_seed(0)
    for number, code in enumerate(_python_blocks(path)):
        exec(compile(code, f"{os.path.basename(path)} (block {number + 1})", "exec"),  # noqa: S102
             namespace)
    capsys.readouterr()
