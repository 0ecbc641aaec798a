"""The one conversion of pydantic's validation errors into dynosim's errors.

Every typed input of dynosim (configuration, workloads, deployment candidates, manifests) is a
pydantic model. A failed validation becomes a list of problems, each a dotted path (list items as
``[i]``) and a message worded the same way everywhere: ``required, but not given``, ``unknown
field``, ``expected an integer, got "x"``. Models derive from :class:`StrictModel`, which raises
the package's own error class (``ConfigError`` or ``WorkloadError``) carrying those problems, so a
model holding another one can put its own path in front of the inner model's problems.
"""

from __future__ import annotations

import difflib
import json
import reprlib
from collections.abc import Iterable
from typing import Any, ClassVar, get_args

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from dynosim.errors import ConfigError, DynosimError, WorkloadError

#: pydantic error types whose message is "expected <this>".
_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
}


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


#: A problem: the dotted path below the model (None: the message names its own field).
Problem = tuple["str | None", str]


class Problems:
    """Mixed into an error class: the error's problems as (path below ``root``, message)."""

    def __init__(self, problems: list[Problem], root: str = "") -> None:
        self.problems = problems
        self.root = root
        lines = []
        for path, message in problems[:MAX_PROBLEMS_SHOWN]:
            where = None if path is None else under(root, path)
            lines.append(f"{where}: {message}" if where else message)
        if len(problems) > MAX_PROBLEMS_SHOWN:
            lines.append(f"and {len(problems) - MAX_PROBLEMS_SHOWN:,} more problems")
        super().__init__("; ".join(lines))


#: Problems an error's message lists (all of them stay in its ``problems``).
MAX_PROBLEMS_SHOWN = 5


class ConfigProblems(Problems, ConfigError):
    """A configuration (or candidate) failed validation; ``problems`` names each field."""


class WorkloadProblems(Problems, WorkloadError):
    """A workload failed validation; ``problems`` names each field."""


def problems(exc: ValidationError, tags: frozenset[str] = frozenset()) -> list[Problem]:
    """The problems of a pydantic ``ValidationError`` as (dotted path, message) pairs.

    ``tags`` are the tag values of discriminated unions in the model, which pydantic puts in
    an error's location; they are left out of the path (``timing.prefill_ms``, not
    ``timing.fixed.prefill_ms``). An error raised by a nested :class:`StrictModel` is re-rooted
    under the location where it occurred; any other dynosim error raised by a validator is a
    complete message that names its own field, and is kept as it is.
    """
    out: list[Problem] = []
    for err in exc.errors():
        loc = [part for part in err["loc"] if not (isinstance(part, str) and part in tags)]
        path = join_path("", loc)
        kind = err["type"]
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, Problems):
            out += [(p if p is None else under(path, p), m) for p, m in cause.problems]
        elif isinstance(cause, DynosimError):
            out.append((None, str(cause)))
        elif kind == "missing":
            out.append((path, "required, but not given"))
        elif kind == "extra_forbidden":
            out.append((path, "unknown field"))
        elif kind in _EXPECTED:
            out.append((path, f"expected {_EXPECTED[kind]}, got {shown(err['input'])}"))
        elif kind == "too_short" and err.get("ctx", {}).get("min_length") == 1:
            out.append((path, "expected at least one entry, got none"))
        elif kind == "union_tag_not_found":
            field = str(err["ctx"]["discriminator"]).strip("'")
            out.append((join_path(path, [field]), "required, but not given"))
        else:
            out.append((path, f"{err['msg']}, got {shown(err['input'])}"))
    return out


def _admits_bool(annotation: Any) -> bool:
    """Whether a field of this type may hold ``True``/``False`` (``bool`` or ``Any`` in it)."""
    if annotation is bool or annotation is Any:
        return True
    return any(_admits_bool(arg) for arg in get_args(annotation))


def _holds_bool(value: Any, seen: set[int] | None = None) -> bool:
    """Whether ``value`` is a bool, or a list or tuple holding one (at any depth). A list met
    again (shared, as YAML aliases share them) is looked at once."""
    if isinstance(value, bool):
        return True
    if not isinstance(value, list | tuple):
        return False
    seen = set() if seen is None else seen
    if id(value) in seen:
        return False
    seen.add(id(value))
    return any(_holds_bool(v, seen) for v in value)


class StrictModel(BaseModel):
    """A frozen model that refuses unknown fields and raises ``_error`` (a :class:`Problems`
    error class) naming every bad field below ``_root`` instead of pydantic's error."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _error: ClassVar[type[Problems]] = ConfigProblems
    _root: ClassVar[str] = ""
    #: Tag values of the discriminated unions below this model (left out of error paths).
    _tags: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="before")
    @classmethod
    def _no_bool_as_number(cls, data: Any) -> Any:
        # pydantic reads true as 1 for a number; in a configuration it is a mistake (a YAML
        # `yes`, a value in the wrong place), so a bool is refused wherever no bool belongs.
        if isinstance(data, dict):
            fields = cls.model_fields
            bad: list[Problem] = [
                (key, f"expected a number, got {shown(value)}")
                for key, value in data.items()
                if key in fields and _holds_bool(value) and not _admits_bool(fields[key].annotation)
            ]
            if bad:
                raise cls._error(bad)
        return data

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise self._error(problems(exc, self._tags), self._root) from None

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any):  # type: ignore[override]
        try:
            return super().model_validate(obj, **kwargs)
        except ValidationError as exc:
            raise cls._error(problems(exc, cls._tags), cls._root) from None


__all__ = [
    "ConfigProblems",
    "Problems",
    "StrictModel",
    "WorkloadProblems",
    "join_path",
    "listing",
    "problems",
    "short_key",
    "shown",
    "suggestion",
    "under",
]
