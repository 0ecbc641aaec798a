"""The one conversion of pydantic's validation errors into dynosim's errors.

Every typed input of dynosim (configuration, workloads, deployment candidates, manifests) is a
pydantic model. A failed validation becomes a list of problems, each a dotted path (list items as
``[i]``) and a message worded the same way everywhere: ``required, but not given``, ``unknown
field``, ``expected an integer, got "x"``. Models derive from :class:`StrictModel`, which raises
the package's own error class (``ConfigError`` or ``WorkloadError``) carrying those problems, so a
model holding another one can put its own path in front of the inner model's problems.
"""

from __future__ import annotations

from typing import Any, ClassVar, get_args

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from dynosim._shown import join_path, shown, under
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
    "problems",
]
