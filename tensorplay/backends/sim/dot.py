"""Graphviz DOT of a simulated graph (``SimBackend.graph_to_dot``): one DOT node per graph node,
edges in execution order, each if/while node a ``cluster`` holding its body."""

from __future__ import annotations

from typing import Any

from .graph import ConditionalNode

__all__ = ["to_dot"]


def _quote(text: str) -> str:
    """A DOT double-quoted string; lines separated by DOT's ``\\n`` escape."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n") + '"'


def _label(node: Any, verbose: bool) -> str:
    lines = [node.kind]
    if node.kind == "kernel":
        lines.append(node.name)
    if verbose:
        lines.extend(str(line) for line in node.details())
    return "\n".join(lines)


class _DotWriter:
    def __init__(self, verbose: bool):
        self.verbose = verbose
        self.lines: list[str] = []
        self.count = 0

    def emit_list(self, nodes, indent: str, previous: str | None) -> str | None:
        """Emit ``nodes`` chained by edges after ``previous``; return the last DOT node id."""
        for node in nodes:
            current = f"n{self.count}"
            self.count += 1
            if isinstance(node, ConditionalNode):
                self._emit_conditional(node, current, indent)
            else:
                label = _quote(_label(node, self.verbose))
                self.lines.append(f"{indent}{current} [label={label}];")
            if previous is not None:
                self.lines.append(f"{indent}{previous} -> {current};")
            previous = current
        return previous

    def _emit_conditional(self, node: ConditionalNode, head: str, indent: str) -> None:
        cluster_label = node.kind
        if self.verbose:
            cluster_label += f"\npredicate=0x{node.predicate_ptr:x}"
        self.lines.append(f"{indent}subgraph cluster_{head[1:]} {{")
        inner = indent + "  "
        self.lines.append(f"{inner}label={_quote(cluster_label)};")
        self.lines.append(f"{inner}{head} [shape=diamond, label="
                          f"{_quote(_label(node, self.verbose))}];")
        last = self.emit_list(node.body, inner, head)
        if node.kind == "while" and last is not None and last != head:
            self.lines.append(f'{inner}{last} -> {head} [style=dashed, label="repeat"];')
        for number, body in enumerate(node.bodies[1:], 1):   # an if_else node's else body,
            if not body:                                       # a switch node's other cases
                continue
            first = f"n{self.count}"
            self.emit_list(body, inner, None)
            label = "else" if node.kind == "if_else" else f"case {number}"
            self.lines.append(f'{inner}{head} -> {first} [style=dashed, label="{label}"];')
        self.lines.append(f"{indent}}}")


def to_dot(nodes, verbose: bool) -> str:
    """Graphviz DOT for a node list: one DOT node per graph node, edges in execution order,
    each if/while node a ``cluster`` holding its body."""
    writer = _DotWriter(verbose)
    writer.lines.append("digraph tensorplay_graph {")
    writer.lines.append("  node [shape=box];")
    writer.emit_list(nodes, "  ", None)
    writer.lines.append("}")
    return "\n".join(writer.lines) + "\n"
