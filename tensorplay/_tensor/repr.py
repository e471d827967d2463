"""``repr(tensor)`` in PyTorch's format (``torch/_tensor_str.py`` with its default print options).

- floats get 4 decimals (``tensor([1.0000, 2.5000])``), or a trailing ``.`` when every value is
  integral (``tensor([1., 2.])``), or scientific notation when the magnitudes span more than
  1000x, exceed 1e8 or go below 1e-4; half floats print as float32;
- every element is right-aligned to the widest; lines wrap at 80 columns;
- more than 1000 elements are summarized with ``...``: 3 items at each edge of every dimension;
- suffixes: ``device='sim:0'`` off the host, ``dtype=...`` unless the dtype is the default of
  its kind (float32, int64, bool, complex64), ``size=(0, 3)`` for empty tensors not of shape
  ``(0,)``.

Accelerator data is read with ``tensor._host_copy("Tensor.__repr__()")``: it waits for the
device and is refused during graph capture under a strict ``capture_error_mode``.
"""

from __future__ import annotations

import math

import numpy as np

from .. import _dtype

__all__ = ["tensor_repr"]

PRECISION = 4
THRESHOLD = 1000
EDGE_ITEMS = 3
LINE_WIDTH = 80
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
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        if self.int_mode:
            self.sci_mode = high / low > 1000.0 or high > 1.0e8
            for value in finite.tolist():
                text = f"{value:.{PRECISION}e}" if self.sci_mode else f"{value:.0f}."
                self.max_width = max(self.max_width, len(text))
        else:
            self.sci_mode = high / low > 1000.0 or high > 1.0e8 or low < 1.0e-4
            for value in finite.tolist():
                text = f"{value:.{PRECISION}e}" if self.sci_mode else f"{value:.{PRECISION}f}"
                self.max_width = max(self.max_width, len(text))

    def width(self) -> int:
        return self.max_width

    def format(self, value) -> str:
        if self.floating:
            if self.sci_mode:
                text = f"{value:{self.max_width}.{PRECISION}e}"
            elif self.int_mode:
                text = f"{value:.0f}"
                if not (math.isinf(value) or math.isnan(value)):
                    text += "."
            else:
                text = f"{value:.{PRECISION}f}"
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
    if values.shape[0] > 2 * EDGE_ITEMS:
        rows = list(range(EDGE_ITEMS)) + list(range(len(values) - EDGE_ITEMS, len(values)))
    else:
        rows = list(range(values.shape[0]))
    if values.ndim == 1:
        return values[rows]
    return np.stack([_summarized(values[i]) for i in rows])


def _vector(values: np.ndarray, indent: int, summarize: bool, formatter) -> str:
    element_length = formatter.width() + 2
    per_line = max(1, int(math.floor((LINE_WIDTH - indent) / element_length)))
    if summarize and values.shape[0] > 2 * EDGE_ITEMS:
        items = ([formatter.format(v) for v in values[:EDGE_ITEMS].tolist()] + [" ..."] +
                 [formatter.format(v) for v in values[-EDGE_ITEMS:].tolist()])
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
    if summarize and count > 2 * EDGE_ITEMS:
        rows = ([_nested(values[i], indent + 1, summarize, formatter) for i in range(EDGE_ITEMS)]
                + ["..."] +
                [_nested(values[i], indent + 1, summarize, formatter)
                 for i in range(count - EDGE_ITEMS, count)])
    else:
        rows = [_nested(values[i], indent + 1, summarize, formatter) for i in range(count)]
    separator = "," + "\n" * (values.ndim - 1) + " " * (indent + 1)
    return "[" + separator.join(rows) + "]"


def format_values(values: np.ndarray, indent: int) -> str:
    """The bracketed body of a repr for host data ``values``."""
    if values.dtype not in (np.float32, np.float64) and values.dtype.kind not in "biuc":
        values = values.astype(np.float32)  # float16 and bfloat16 print as float32
    summarize = values.size > THRESHOLD
    shown = _summarized(values) if summarize else values
    formatter = _ComplexFormatter(shown) if values.dtype.kind == "c" else _Formatter(shown)
    return _nested(values, indent, summarize, formatter)


def _add_suffixes(text: str, suffixes, indent: int) -> str:
    parts = [text]
    last_line = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last_line + len(suffix) + 2 > LINE_WIDTH:
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
