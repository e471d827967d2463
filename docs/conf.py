"""Sphinx configuration of the tensorplay documentation (``docs/``).

Built by ``tests/run_suite.py`` once per test run with ``sphinx-build -W --keep-going -n``: any
warning fails the suite, a broken cross-reference among them (``-n``). Two checks of our own are
warnings too: a public object whose docstring is empty, and a reference that names an object by
a private path (``tensorplay._tensor.tensor.Tensor``, as annotations and base classes do) that
no public name documents. The reference pages list every public name;
``tests/test_docs.py`` fails when one is missing.
"""

from __future__ import annotations

import os
import pkgutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# The pages are the same wherever they are built: no accelerator is imported (the docstrings do
# not depend on it, and importing CuPy would only cost time).
os.environ["TENSORPLAY_ACCELERATOR"] = "none"

import tensorplay  # noqa: E402
from sphinx.util import logging  # noqa: E402
from sphinx.util.nodes import make_refnode  # noqa: E402

project = "tensorplay"
author = "The tensorplay authors"
copyright = "2026, The tensorplay authors"
release = version = tensorplay.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
]
exclude_patterns = ["_build"]
templates_path: list[str] = []
html_static_path: list[str] = []

# Python objects: Google-style docstrings (Args/Returns/Raises), as the source writes them.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_member_order = "alphabetical"
autodoc_default_options = {"show-inheritance": True}
autosummary_generate = False
add_module_names = False
default_role = "py:obj"

# Names outside this project that signatures and docstrings mention (there is no network for
# intersphinx): they stay plain text instead of failing -n.
nitpick_ignore_regex = [
    ("py:.*", r"(numpy|np|ml_dtypes|cupy|torch|jax|safetensors)(\..*)?"),
    ("py:.*", r"(os|collections|numbers|contextlib|logging|types|weakref)\..*"),
]
# A returned object that no public module exports, described where it is returned:
# Tensor.register_hook's handle (its one method is ``remove()``).
nitpick_ignore = [
    ("py:class", "tensorplay._tensor.autograd.RemovableHandle"),
]

html_theme = "furo"
html_title = f"tensorplay {release}"
html_theme_options = {"navigation_with_keys": True}
html_show_sourcelink = False
pygments_style = "friendly"
pygments_dark_style = "monokai"

_log = logging.getLogger("tensorplay.docs")


_warned: set[str] = set()


def _warn_missing_docstring(app, what, name, obj, options, lines):
    """A public object rendered without a docstring is a warning (so the -W build fails);
    once per object (autosummary's tables ask for the docstring too)."""
    if not any(line.strip() for line in lines) and name not in _warned:
        _warned.add(name)
        _log.warning("%s %s has no docstring: write one (a summary line, then Args/Returns/"
                     "Raises)", what, name, type="tensorplay", subtype="docstring")


def _public_bases(app, name, obj, options, bases):
    """Show a class's public ancestors: a private base (``_Loss``) is replaced by its bases."""
    index = 0
    while index < len(bases):
        base = bases[index]
        if getattr(base, "__name__", "").startswith("_") and base is not object:
            bases[index:index + 1] = [b for b in base.__bases__ if b not in bases]
        else:
            index += 1
    if bases == [object]:
        bases.clear()


def _lookup(path: str):
    """The object a dotted path names (a module, then attributes), or None."""
    try:
        return pkgutil.resolve_name(path)
    except (ImportError, AttributeError, ValueError):
        return None


def _public_name(env, obj):
    """The documented name of ``obj`` (a class or function documented under another path)."""
    cache = getattr(env, "_tp_documented", None)
    if cache is None:
        cache = env._tp_documented = {}
        for name, entry in env.get_domain("py").objects.items():
            if entry.aliased:
                continue
            found = _lookup(name)
            if found is not None and not isinstance(found, (int, float, str, tuple)):
                cache.setdefault(id(found), (name, entry))
    return cache.get(id(obj))


def _resolve_by_object(app, env, node, contnode):
    """Resolve a Python reference whose target is documented under another name: annotations
    and base classes name an object by the module that defines it
    (``tensorplay._tensor.tensor.Tensor``), the pages by its public name
    (``tensorplay.Tensor``)."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    candidates = [target]
    if not target.startswith("tensorplay"):
        module = node.get("py:module") or "tensorplay"
        candidates += [f"{module}.{target}", f"tensorplay.{target}"]
    for candidate in candidates:
        obj = _lookup(candidate)
        if obj is None or isinstance(obj, (int, float, str, tuple)):
            continue
        found = _public_name(env, obj)
        if found is not None:
            name, entry = found
            return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id,
                                contnode, name)
    # A private name of ours in a signature (a type alias such as control_flow._Carried, a
    # private base's name) has no page by design: plain text, not a broken reference.
    if target.startswith("tensorplay.") and target.rsplit(".", 1)[-1].startswith("_"):
        return contnode
    return None


def setup(app):
    app.connect("autodoc-process-docstring", _warn_missing_docstring, priority=400)
    app.connect("autodoc-process-bases", _public_bases)
    app.connect("missing-reference", _resolve_by_object)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
