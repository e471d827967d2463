"""``repr(tensor)`` in PyTorch's format (``torch/_tensor_str.py`` with its default print options).

- floats get 4 decimals (``tensor([1.0000, 2.5000])``), or a trailing ``.`` when every value is
  integral (``tensor([1., 2.])``), or scientific notation when the magnitudes span more than
  1000x, exceed 1e8 or go below 1e-4; half floats print as float32;
- every element is right-aligned to the widest; lines wrap at 80 columns;
- more than 1000 elements are summarized with ``...``: 3 items at each edge of every dimension;
- suffixes: ``device='sim:0'`` off the host, ``dtype=...`` unless the dtype is the default of
  its kind (float32, int64, bool, complex64), ``size=(0, 3)`` for empty tensors not of shape
  ``(0,)``.

The numbers above are the defaults; :func:`set_printoptions` changes them for the process, as
``torch.set_printoptions`` does (the options are global, not per thread).

Accelerator data is read with ``tensor._host_copy("Tensor.__repr__()")``: it waits for the
device and is refused during graph capture under a strict ``capture_error_mode``.
"""

from __future__ import annotations

import math

import numpy as np

from .. import _dtype

__all__ = ["get_printoptions", "set_printoptions", "tensor_repr"]


class _PrintOptions:
    """The process-wide print options (PyTorch's ``PRINT_OPTS``)."""

    __slots__ = ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")

    def __init__(self):
        self.precision = 4
        self.threshold: float = 1000
        self.edgeitems = 3
        self.linewidth = 80
        self.sci_mode: bool | None = None


_OPTS = _PrintOptions()
_PROFILES: dict[str, dict[str, int | float]] = {
    "default": {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80},
    "short": {"precision": 2, "threshold": 1000, "edgeitems": 2, "linewidth": 80},
    "full": {"precision": 4, "threshold": math.inf, "edgeitems": 3, "linewidth": 80},
}


def _check_count(name: str, value, allow_inf: bool = False) -> None:
    if allow_inf and isinstance(value, float) and value == math.inf:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        valid = "a non-negative int or math.inf" if allow_inf else "a non-negative int"
        raise TypeError(f"set_printoptions(): {name} must be {valid}, got "
                        f"{type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"set_printoptions(): {name} must be non-negative, got {value}")


def set_printoptions(precision: int | None = None, threshold: float | None = None,
                     edgeitems: int | None = None, linewidth: int | None = None,
                     profile: str | None = None, sci_mode: bool | None = None) -> None:
    """Set how tensors print, for the whole process (``torch.set_printoptions``).

    Args:
        precision: digits after the decimal point for floats (default 4).
        threshold: tensors with more elements than this are summarized with ``...``
            (default 1000; ``math.inf`` never summarizes).
        edgeitems: items shown at each edge of every summarized dimension (default 3).
        linewidth: columns before a line wraps (default 80).
        profile: ``"default"``, ``"short"`` (precision 2, edgeitems 2) or ``"full"`` (no
            summarizing); applied first, then any other argument given overrides it.
        sci_mode: ``True`` always scientific, ``False`` never, ``None`` chosen from the values.

    Pitfall (as in PyTorch): ``sci_mode`` is always set, so a call that leaves it out resets
    it to ``None`` (automatic); the other options keep their value when left out.

    Raises:
        ValueError: an unknown profile, or a negative count.
        TypeError: a count that is not an int, or ``sci_mode`` not a bool or None.
    """
    value: float | None   # an option's value, in each loop below
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"set_printoptions(): invalid profile {profile!r}; valid: "
                             f"{', '.join(repr(name) for name in _PROFILES)}")
        for name, value in _PROFILES[profile].items():
            setattr(_OPTS, name, value)
    for name, value, allow_inf in (("precision", precision, False),
                                   ("threshold", threshold, True),
                                   ("edgeitems", edgeitems, False),
                                   ("linewidth", linewidth, False)):
        if value is not None:
            _check_count(name, value, allow_inf)
    if sci_mode is not None and not isinstance(sci_mode, bool):
        raise TypeError(f"set_printoptions(): sci_mode must be True, False or None, got "
                        f"{type(sci_mode).__name__} {sci_mode!r}")
    for name, value in (("precision", precision), ("threshold", threshold),
                        ("edgeitems", edgeitems), ("linewidth", linewidth)):
        if value is not None:
            setattr(_OPTS, name, value)
    _OPTS.sci_mode = sci_mode


def get_printoptions() -> dict:
    """The current print options as a dict (``torch._tensor_str.get_printoptions``)."""
    return {name: getattr(_OPTS, name) for name in _PrintOptions.__slots__}


_DEFAULT_DTYPES = (_dtype.float32, _dtype.int64, _dtype.bool, _dtype.complex64)


class _Formatter:
    """Chooses one format (int/fixed/scientific) and width for all the values shown."""

    def __init__(self, values: np.ndarray):
        self.floating = values.dtype.kind == "f"
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        flat = values.reshape(-1)
        if not self.floating:
            for value in flat.tolist():
                self.max_width = max(self.max_width, len(f"{value}"))
            return
        finite = flat[np.isfinite(flat) & (flat != 0)].astype(np.float64)
        if finite.size == 0:
            return
        magnitudes = np.abs(finite)
        low, high = float(magnitudes.min()), float(magnitudes.max())
        precision = _OPTS.precision
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        if self.int_mode:
            self.sci_mode = high / low > 1000.0 or high > 1.0e8
            if _OPTS.sci_mode is not None:
                self.sci_mode = _OPTS.sci_mode
            for value in finite.tolist():
                text = f"{value:.{precision}e}" if self.sci_mode else f"{value:.0f}."
                self.max_width = max(self.max_width, len(text))
        else:
            self.sci_mode = high / low > 1000.0 or high > 1.0e8 or low < 1.0e-4
            if _OPTS.sci_mode is not None:
                self.sci_mode = _OPTS.sci_mode
            for value in finite.tolist():
                text = f"{value:.{precision}e}" if self.sci_mode else f"{value:.{precision}f}"
                self.max_width = max(self.max_width, len(text))

    def width(self) -> int:
        return self.max_width

    def format(self, value) -> str:
        if self.floating:
            precision = _OPTS.precision
            if self.sci_mode:
                text = f"{value:{self.max_width}.{precision}e}"
            elif self.int_mode:
                text = f"{value:.0f}"
                if not (math.isinf(value) or math.isnan(value)):
                    text += "."
            else:
                text = f"{value:.{precision}f}"
        else:
            text = f"{value}"
        return (self.max_width - len(text)) * " " + text


class _ComplexFormatter:
    """Formats ``real+imagj`` with one formatter for each part, as PyTorch does."""

    def __init__(self, values: np.ndarray):
        self.real = _Formatter(values.real)
        self.imag = _Formatter(values.imag)

    def width(self) -> int:
        return self.real.width() + self.imag.width() + 1

    def format(self, value) -> str:
        real = self.real.format(value.real)
        imag = (self.imag.format(value.imag) + "j").lstrip()
        return real + imag if imag[0] in "+-" else real + "+" + imag


def _summarized(values: np.ndarray) -> np.ndarray:
    """Only the values a summarized repr shows (edge items of every dimension)."""
    if values.ndim == 0:
        return values
    edge = _OPTS.edgeitems
    if values.shape[0] > 2 * edge:
        rows = list(range(edge)) + list(range(len(values) - edge, len(values)))
    else:
        rows = list(range(values.shape[0]))
    if values.ndim == 1:
        return values[rows]
    return np.stack([_summarized(values[i]) for i in rows])


def _vector(values: np.ndarray, indent: int, summarize: bool, formatter) -> str:
    element_length = formatter.width() + 2
    per_line = max(1, int(math.floor((_OPTS.linewidth - indent) / element_length)))
    edge = _OPTS.edgeitems
    if summarize and values.shape[0] > 2 * edge:
        items = ([formatter.format(v) for v in values[:edge].tolist()] + [" ..."] +
                 [formatter.format(v) for v in values[values.shape[0] - edge:].tolist()])
    else:
        items = [formatter.format(v) for v in values.tolist()]
    lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"


def _nested(values: np.ndarray, indent: int, summarize: bool, formatter) -> str:
    if values.ndim == 0:
        return formatter.format(values.item())
    if values.ndim == 1:
        return _vector(values, indent, summarize, formatter)
    count = values.shape[0]
    edge = _OPTS.edgeitems
    if summarize and count > 2 * edge:
        rows = ([_nested(values[i], indent + 1, summarize, formatter) for i in range(edge)]
                + ["..."] +
                [_nested(values[i], indent + 1, summarize, formatter)
                 for i in range(count - edge, count)])
    else:
        rows = [_nested(values[i], indent + 1, summarize, formatter) for i in range(count)]
    separator = "," + "\n" * (values.ndim - 1) + " " * (indent + 1)
    return "[" + separator.join(rows) + "]"


def format_values(values: np.ndarray, indent: int) -> str:
    """The bracketed body of a repr for host data ``values``."""
    if values.dtype not in (np.float32, np.float64) and values.dtype.kind not in "biuc":
        values = values.astype(np.float32)  # float16 and bfloat16 print as float32
    summarize = values.size > _OPTS.threshold
    shown = _summarized(values) if summarize else values
    formatter = _ComplexFormatter(shown) if values.dtype.kind == "c" else _Formatter(shown)
    return _nested(values, indent, summarize, formatter)


def _add_suffixes(text: str, suffixes, indent: int) -> str:
    parts = [text]
    last_line = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last_line + len(suffix) + 2 > _OPTS.linewidth:
            parts.append(",\n" + " " * indent + suffix)
            last_line = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last_line += len(suffix) + 2
    parts.append(")")
    return "".join(parts)


def tensor_repr(tensor) -> str:
    """PyTorch's ``repr`` for a tensorplay Tensor (see the module docstring)."""
    prefix = "tensor("
    indent = len(prefix)
    suffixes = []
    if tensor.device.type != "cpu":
        suffixes.append(f"device='{tensor.device}'")
    if tensor.numel() == 0:
        if tensor.ndim != 1:
            suffixes.append(f"size={tuple(tensor.shape)}")
        if tensor.dtype is not _dtype.get_default_dtype():
            suffixes.append(f"dtype={tensor.dtype}")
        body = "[]"
    else:
        if tensor.dtype not in _DEFAULT_DTYPES:
            suffixes.append(f"dtype={tensor.dtype}")
        values = np.asarray(tensor._host_copy("Tensor.__repr__()"))
        body = format_values(values, indent)
    return _add_suffixes(prefix + body, suffixes, indent)
