"""How dynosim's messages show what they name: a value (as JSON shows it, cut short), a
document's key, a list of names, a dotted path, and the closest name to a typo. The same
everywhere, and without pydantic, so that code which only reports (a replay's report, a trace
file's reader) shows values as the models' checks do without importing them."""

from __future__ import annotations

import json
import reprlib
from collections.abc import Iterable
from typing import Any


def shown(value: Any, width: int = 60) -> str:
    """A value as JSON shows it (repr where JSON cannot), cut short to stay one readable line.

    Only what is shown is ever rendered: a value of a billion elements (nested aliases of a
    YAML file) or a string of gigabytes costs no more than ``width`` characters."""
    pieces: list[str] = []
    _render(value, pieces, [width + 1], set())
    text = "".join(pieces)
    return text if len(text) <= width else text[: width - 3] + "..."


#: Bits of the largest integer written out in full (about 1,000 digits); larger ones by size.
_MAX_INT_BITS = 3_300


def _render(value: Any, out: list[str], budget: list[int], inside: set[int]) -> None:
    """Append ``value`` as JSON (``json.dumps``'s spacing) to ``out`` until ``budget[0]``
    characters are spent; ``inside``: the containers being rendered (a recursive one shows
    as ``[...]``)."""
    if budget[0] <= 0:
        return
    if isinstance(value, str):
        text = json.dumps(value[: budget[0]])
    elif value is None or isinstance(value, bool | float):
        text = json.dumps(value)
    elif isinstance(value, int):
        bits = abs(value).bit_length()
        if bits <= _MAX_INT_BITS:
            text = str(value)
        else:
            sign = "a negative" if value < 0 else "an"
            text = f"<{sign} integer of ~{int(bits * 0.30103):,} digits>"
    elif isinstance(value, list | tuple | dict):
        if id(value) in inside:
            text = "[...]"
        else:
            inside.add(id(value))
            items = value.items() if isinstance(value, dict) else ((None, v) for v in value)
            out.append("{" if isinstance(value, dict) else "[")
            budget[0] -= 1
            for k, (key, item) in enumerate(items):
                if budget[0] <= 0:
                    break
                if k:
                    out.append(", ")
                    budget[0] -= 2
                if isinstance(value, dict):
                    _render(key if isinstance(key, str) else str(key)[:60], out, budget, inside)
                    out.append(": ")
                    budget[0] -= 2
                _render(item, out, budget, inside)
            inside.discard(id(value))
            text = "}" if isinstance(value, dict) else "]"
    else:
        text = reprlib.repr(value)
    out.append(text)
    budget[0] -= len(text)


def join_path(prefix: str, loc: tuple[Any, ...] | list[Any]) -> str:
    """``prefix`` followed by ``loc`` as a dotted path, list indices as ``[i]``."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part != "[key]":  # pydantic's marker for a bad mapping key; the key is shown
            part = short_key(str(part))  # a key of the document: shown, not copied whole
            out = f"{out}.{part}" if out else part
    return out


#: Characters of a document's key shown in a path.
_KEY_WIDTH = 40


def short_key(key: str) -> str:
    """A document's key as a path shows it: cut short past a few dozen characters."""
    return key if len(key) <= _KEY_WIDTH else key[: _KEY_WIDTH - 3] + "..."


def listing(names: Iterable[Any], width: int = 200) -> str:
    """``names`` (a document's keys or values) joined by ", " as written, each cut short
    (:func:`short_key`), the whole stopped near ``width`` characters with how many more."""
    names = list(names)
    out: list[str] = []
    for k, name in enumerate(names):
        if out and sum(len(n) + 2 for n in out) > width:
            out.append(f"and {len(names) - k:,} more")
            break
        out.append(short_key(str(name)))
    return ", ".join(out)


def suggestion(value: str, names: Iterable[str]) -> str:
    """``"; did you mean 'X'?"`` naming the one of ``names`` closest to ``value`` (a typo, or
    another case), or ``""`` when none is close."""
    # Imported here, on the error path: a command's start does without difflib.
    import difflib

    names = [str(n) for n in names]
    folded = {n.casefold(): n for n in names}
    if value.casefold() in folded:
        best = [folded[value.casefold()]]
    else:
        best = difflib.get_close_matches(value, names, n=1, cutoff=0.6)
    return f"; did you mean {best[0]!r}?" if best and best[0] != value else ""


def under(root: str, path: str) -> str:
    """The dotted ``path`` below ``root`` (either may be empty)."""
    if not root or not path:
        return root or path
    return root + path if path.startswith("[") else f"{root}.{path}"


__all__ = ["join_path", "listing", "short_key", "shown", "suggestion", "under"]
