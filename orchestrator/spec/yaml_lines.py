"""YAML for the swarm spec, keeping the line of every key and list item, and refusing what YAML allows
but a spec must not have: a key given twice in one mapping (PyYAML keeps the last one silently).

``compose_with_lines(text, filename)`` returns plain data (dicts, lists, scalars) and a map from each
location (``("agents", 1, "count")``) to its 1-based line; errors are ``SpecError`` lines
``file:line: problem``. ``line_of`` and ``dotted`` turn a pydantic error location back into those.
"""

from __future__ import annotations

from typing import Any

import yaml

Loc = tuple[Any, ...]


class SpecError(ValueError):
    """A swarm.yaml that does not parse or validate; the message lists ``file:line: field: problem``,
    one problem per line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def _scalar(node: yaml.Node) -> Any:
    return yaml.safe_load(yaml.serialize(node))


def _construct(node: yaml.Node, loc: Loc, lines: dict[Loc, int], problems: list[str], filename: str) -> Any:
    lines.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node)
            line = key_node.start_mark.line + 1
            if key in out:
                first = lines[(*loc, key)]
                problems.append(
                    f"{filename}:{line}: {dotted((*loc, key))}: given twice in one mapping (first on line "
                    f"{first}); YAML would keep only the last one"
                )
                continue
            lines[(*loc, key)] = line
            out[key] = _construct(value_node, (*loc, key), lines, problems, filename)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item, (*loc, i), lines, problems, filename) for i, item in enumerate(node.value)]
    return _scalar(node)


def compose_with_lines(text: str, filename: str) -> tuple[Any, dict[Loc, int]]:
    """Plain data and the line of every location; ``SpecError`` for bad YAML or repeated keys."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise SpecError([f"{filename}:{line}: not valid YAML: {exc.problem or exc}"]) from exc
    except yaml.YAMLError as exc:
        raise SpecError([f"{filename}:1: not valid YAML: {exc}"]) from exc
    if node is None:
        return None, {}
    lines: dict[Loc, int] = {}
    problems: list[str] = []
    data = _construct(node, (), lines, problems, filename)
    if problems:
        raise SpecError(problems)
    return data, lines


def line_of(loc: Loc, lines: dict[Loc, int]) -> int:
    """The line of ``loc``, or of its nearest enclosing location that has one."""
    # Pydantic inserts validator and union-member names into locations: keep the data's own parts.
    clean = tuple(
        p
        for p in loc
        if isinstance(p, int) or not str(p).startswith(("function-", "union", "literal[", "str", "Runtime"))
    )
    while clean and clean not in lines:
        clean = clean[:-1]
    return lines.get(clean, 1)


def dotted(loc: Loc) -> str:
    """``("agents", 1, "count")`` -> ``agents[1].count``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"
