"""Parsing the YAML and JSON documents users hand dynosim (configurations, spaces, candidates,
manifests, reports, measured runs) within bounds, so that a small hostile file cannot cost
minutes or gigabytes before its error.

YAML: aliases may add at most :data:`MAX_ALIAS_NODES` nodes to a document (a few nested
aliases of a few hundred bytes otherwise stand for billions of nodes, which validation and
messages would walk), an alias never refers to the node it is inside (a recursive document),
nesting is at most :data:`MAX_DEPTH` deep, a mapping names each key once (a second ``cluster:``
would silently replace the first), and an integer has at most as many digits as Python
converts. All of it is checked on the parser's events before any node is built. JSON: the same
nesting, key and digit rules.

Every problem raises :class:`DocumentError`, whose message says where (line and column) and
what; callers put the file in front.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from types import ModuleType
from typing import Any

#: Nodes the aliases of one document may add, all uses counted with what they stand for.
MAX_ALIAS_NODES = 100_000
#: Nesting of collections in a document (a configuration nests 4 levels, a manifest about 15).
MAX_DEPTH = 100
#: Digits of an integer (Python's own limit of converting text to an integer).
MAX_DIGITS = sys.get_int_max_str_digits() or 4300


class DocumentError(ValueError):
    """A document that is not valid, or past a bound: ``where`` (``line L, column C`` or
    empty) and ``problem``."""

    def __init__(self, where: str, problem: str) -> None:
        self.where, self.problem = where, problem
        super().__init__(f"{where}: {problem}" if where else problem)


def _at(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


@cache
def _yaml() -> tuple[ModuleType, type, type]:
    """PyYAML, the safe loader it has (its C parser when built with one) and that loader
    refusing duplicate keys and integers past :data:`MAX_DIGITS`; made on first use, so a
    start that reads no YAML does not import PyYAML (~15 ms)."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc, valid-type]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(
                    key_node, yaml.ScalarNode
                ):
                    continue
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise DocumentError(
                        _at(key_node.start_mark),
                        f"duplicate key {_short(key_node.value)} (first at {_at(seen[key])}); "
                        "each key may appear once",
                    )
                seen[key] = key_node.start_mark
            return super().construct_mapping(node, deep)

        def construct_yaml_int(self, node: Any) -> Any:
            digits = sum(c.isdigit() for c in node.value)
            if digits > MAX_DIGITS:
                raise DocumentError(_at(node.start_mark), _too_many_digits(digits))
            return super().construct_yaml_int(node)

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)
    return yaml, base, Loader


def _short(text: str, width: int = 40) -> str:
    return repr(text if len(text) <= width else text[: width - 3] + "...")


def _too_many_digits(digits: int) -> str:
    return f"an integer of {digits:,} digits, more than the {MAX_DIGITS:,} allowed"


def _check_events(text: str) -> None:
    """Walk the parser's events: nesting depth, and the nodes aliases add (each alias counts
    the nodes of what it names, aliases inside that included)."""
    sizes: dict[str, int] = {}  # anchor -> nodes it stands for, once its node is complete
    open_nodes: list[list[Any]] = []  # [nodes so far, anchor] of each collection being read
    added = 0
    yaml, base, _ = _yaml()
    for event in yaml.parse(text, Loader=base):
        if isinstance(event, yaml.CollectionStartEvent):
            if len(open_nodes) >= MAX_DEPTH:
                raise DocumentError(_at(event.start_mark), f"nested deeper than {MAX_DEPTH} levels")
            open_nodes.append([1, event.anchor])
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            size, anchor = open_nodes.pop()
        elif isinstance(event, yaml.ScalarEvent):
            size, anchor = 1, event.anchor
        elif isinstance(event, yaml.AliasEvent):
            if any(event.anchor == a for _, a in open_nodes):
                raise DocumentError(
                    _at(event.start_mark),
                    f"alias *{event.anchor} refers to a node it is inside (a recursive document)",
                )
            size, anchor = sizes.get(event.anchor, 1), None  # an undefined one: the parser says
            added += size
            if added > MAX_ALIAS_NODES:
                raise DocumentError(
                    _at(event.start_mark),
                    f"aliases expand the document by more than {MAX_ALIAS_NODES:,} nodes; "
                    "write the repeated values out, or repeat them less",
                )
        else:
            continue
        if anchor is not None:
            sizes[anchor] = size
        if open_nodes:
            open_nodes[-1][0] += size


def yaml_documents(text: str) -> list[Any]:
    """Every document of a YAML (or JSON) stream, as Python data, within the module's bounds.

    Raises :class:`DocumentError` naming the line and column of what is wrong."""
    yaml, _, loader = _yaml()
    try:
        _check_events(text)
        return list(yaml.load_all(text, Loader=loader))
    except yaml.MarkedYAMLError as e:
        raise DocumentError(_at(e.problem_mark), f"not valid YAML: {e.problem}") from None
    except yaml.YAMLError as e:
        raise DocumentError("", f"not valid YAML: {str(e)[:200]}") from None


def yaml_document(text: str) -> Any:
    """The one document of a YAML (or JSON) text (None when it is empty), within the
    module's bounds; :class:`DocumentError` otherwise (a stream of several documents too)."""
    documents = yaml_documents(text)
    if len(documents) > 1:
        raise DocumentError("", f"{len(documents)} YAML documents; expected one")
    return documents[0] if documents else None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DocumentError("", f"duplicate key {_short(key)}; each key may appear once")
        out[key] = value
    return out


def json_document(text: str | bytes) -> Any:
    """A JSON document as Python data: nesting at most what Python's parser takes (about
    :data:`MAX_DEPTH` levels are ever needed), each key once per object, integers of at most
    :data:`MAX_DIGITS` digits. Raises :class:`DocumentError` naming the line and column."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        raise DocumentError(
            f"line {e.lineno}, column {e.colno}", f"not valid JSON: {e.msg}"
        ) from None
    except RecursionError:
        raise DocumentError("", "not valid JSON here: nested too deeply") from None
    except ValueError as e:  # an integer past the digits Python converts
        if "digits" not in str(e):
            raise
        raise DocumentError("", f"an integer of more than {MAX_DIGITS:,} digits") from None


__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_DEPTH",
    "MAX_DIGITS",
    "DocumentError",
    "json_document",
    "yaml_document",
    "yaml_documents",
]
