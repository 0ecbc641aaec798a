"""A space of candidate configurations: settings at dotted paths of a :class:`SimConfig`
(``"cluster.num_workers"``, ``"prefill.engine.max_num_seqs"``), combined as a grid (every
combination), zipped (lists paired element-wise), multiplied or concatenated.

Every path is checked against the configuration's sections before anything runs (an unknown path
names itself and the keys allowed there), and every candidate is validated into a SimConfig (a bad
value names the path and the value).
"""

from __future__ import annotations

import copy
import itertools
import math
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from dynosim._documents import DocumentError, yaml_document
from dynosim._files import MAX_LINE_BYTES, read_input
from dynosim._shown import shown
from dynosim.config import SimConfig
from dynosim.errors import ConfigError

#: Role sections whose unset ``engine`` / ``timing`` stands for the shared one.
_ROLES = ("prefill", "decode")

#: The key of a space file that holds zipped lists.
ZIP_KEY = "zip"


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation may hold (through Optional, unions and Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def check_path(path: str) -> None:
    """Check that ``path`` names a setting or section of :class:`SimConfig`.

    Raises:
        ConfigError: naming the path, where it goes wrong and the keys allowed there.
    """
    if not isinstance(path, str) or not path:
        raise ConfigError(f"space: a path must be a non-empty dotted string, got {shown(path)}")
    models: list[type[BaseModel]] = [SimConfig]
    parts = path.split(".")
    for i, part in enumerate(parts):
        where = ".".join(parts[:i])
        if not models:
            raise ConfigError(
                f"space: unknown path {shown(path)}: {where} is a value, not a section with keys"
            )
        fields = {name: f for m in models for name, f in m.model_fields.items()}
        if part not in fields:
            allowed = ", ".join(sorted(fields))
            section = f"section {shown(where)}" if where else "the configuration"
            raise ConfigError(
                f"space: unknown path {shown(path)}: {section} has no key {shown(part)}; "
                f"allowed keys: {allowed}"
            )
        models = _models(fields[part].annotation)


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``path`` of a configuration dict (``SimConfig.model_dump()``) to ``value``.

    A role's unset ``engine`` or ``timing`` (``prefill.engine`` None) starts as a copy of the
    shared section, which it then replaces for that role; another unset section starts empty.
    """
    parts = path.split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if not isinstance(child, dict):
            shared = data.get(part) if i == 1 and parts[0] in _ROLES else None
            child = copy.deepcopy(shared) if isinstance(shared, dict) else {}
            node[part] = child
        node = child
    node[parts[-1]] = copy.deepcopy(value)


def _values(path: str, values: Any) -> list[Any]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise ConfigError(f"space: {path}: expected a list of values, got {shown(values)}")
    if not values:
        raise ConfigError(f"space: {path}: expected at least one value, got an empty list")
    return list(values)


#: The most candidates a space holds: each is a configuration to replay.
MAX_CANDIDATES = 1_000_000


def _check_size(n: int, how: str) -> None:
    """Refuse a space of ``n`` candidates (``how`` spells the product) past the limit, before
    listing them."""
    if n > MAX_CANDIDATES:
        raise ConfigError(
            f"space: {how} = {n:,} candidates, more than the {MAX_CANDIDATES:,} a sweep replays"
        )


class _Part:
    """Candidates without listing them: how many, the ``i``-th, all in order, and the paths
    they set. A grid of a million combinations holds its lists, not a million mappings."""

    paths: tuple[str, ...]

    def __len__(self) -> int:
        raise NotImplementedError

    def item(self, i: int) -> dict[str, Any]:
        """Candidate ``i`` (0 <= i < len)."""
        raise NotImplementedError

    def items(self) -> Iterator[dict[str, Any]]:
        """Every candidate, in order."""
        return (self.item(i) for i in range(len(self)))


class _Grid(_Part):
    """Every combination of the lists, the first path varying slowest."""

    def __init__(self, paths: Sequence[str], lists: Sequence[list[Any]]) -> None:
        self.paths, self._lists = tuple(paths), list(lists)
        self._n = math.prod(len(v) for v in lists)

    def __len__(self) -> int:
        return self._n

    def item(self, i: int) -> dict[str, Any]:
        out = {}
        for path, values in zip(reversed(self.paths), reversed(self._lists), strict=True):
            i, k = divmod(i, len(values))
            out[path] = values[k]
        return dict(reversed(out.items()))

    def items(self) -> Iterator[dict[str, Any]]:
        return (dict(zip(self.paths, c, strict=True)) for c in itertools.product(*self._lists))


class _Zipped(_Part):
    """Lists of one length paired element-wise."""

    def __init__(self, lists: Mapping[str, list[Any]]) -> None:
        self.paths, self._lists = tuple(lists), list(lists.values())

    def __len__(self) -> int:
        return len(self._lists[0]) if self._lists else 0

    def item(self, i: int) -> dict[str, Any]:
        return {p: v[i] for p, v in zip(self.paths, self._lists, strict=True)}


class _Listed(_Part):
    """Candidates given one by one."""

    def __init__(self, candidates: list[dict[str, Any]]) -> None:
        self._candidates = candidates
        self.paths = tuple(dict.fromkeys(p for c in candidates for p in c))

    def __len__(self) -> int:
        return len(self._candidates)

    def item(self, i: int) -> dict[str, Any]:
        return dict(self._candidates[i])


class _Product(_Part):
    """Every candidate of ``a`` combined with every one of ``b`` (``b`` varying fastest)."""

    def __init__(self, a: _Part, b: _Part) -> None:
        self._a, self._b = a, b
        self.paths = (*a.paths, *b.paths)

    def __len__(self) -> int:
        return len(self._a) * len(self._b)

    def item(self, i: int) -> dict[str, Any]:
        i, k = divmod(i, len(self._b))
        return {**self._a.item(i), **self._b.item(k)}

    def items(self) -> Iterator[dict[str, Any]]:
        return ({**a, **b} for a in self._a.items() for b in self._b.items())


class _Sum(_Part):
    """The candidates of ``a``, then those of ``b``."""

    def __init__(self, a: _Part, b: _Part) -> None:
        self._a, self._b = a, b
        self.paths = tuple(dict.fromkeys((*a.paths, *b.paths)))

    def __len__(self) -> int:
        return len(self._a) + len(self._b)

    def item(self, i: int) -> dict[str, Any]:
        return self._a.item(i) if i < len(self._a) else self._b.item(i - len(self._a))

    def items(self) -> Iterator[dict[str, Any]]:
        return itertools.chain(self._a.items(), self._b.items())


class Space:
    """Candidates, each a mapping of dotted config path -> value.

    ``Space({"cluster.num_workers": [2, 4], "engine.max_num_seqs": [64, 256]})`` is the grid of
    every combination (4 candidates; the first path varies slowest).
    ``Space.zip({"engine.tensor_parallel_size": [1, 2], "timing.tp": [1, 2]})`` pairs the lists
    (2 candidates). ``a * b`` is every candidate of ``a`` combined with every one of ``b``;
    ``a + b`` the candidates of ``a``, then those of ``b``. ``Space.of([{...}, ...])`` lists
    candidates one by one. A path a candidate does not set keeps the base configuration's value.

    Candidates are never listed up front: a space holds its lists and how they combine, and
    makes each candidate when it is asked for (a grid of a million costs its lists).
    """

    def __init__(self, grid: Mapping[str, Sequence[Any]] | None = None) -> None:
        grid = dict(grid or {})
        for path in grid:
            check_path(path)
        lists = [_values(p, v) for p, v in grid.items()]
        _check_size(
            math.prod(len(v) for v in lists),
            " x ".join(f"{len(v):,} {p}" for p, v in zip(grid, lists, strict=True)),
        )
        self._part: _Part = _Grid(list(grid), lists)

    @classmethod
    def _of_part(cls, part: _Part) -> Space:
        space = cls()
        space._part = part
        return space

    @classmethod
    def zip(cls, lists: Mapping[str, Sequence[Any]]) -> Space:
        """Lists paired element-wise: candidate ``i`` takes the ``i``-th value of every path
        (the lists must have one length)."""
        checked = {p: _values(p, v) for p, v in dict(lists).items()}
        for path in checked:
            check_path(path)
        lengths = {p: len(v) for p, v in checked.items()}
        if len(set(lengths.values())) > 1:
            given = ", ".join(f"{p} has {n}" for p, n in lengths.items())
            raise ConfigError(f"space: zipped lists must have one length; {given}")
        return cls._of_part(_Zipped(checked))

    @classmethod
    def of(cls, candidates: Sequence[Mapping[str, Any]]) -> Space:
        """The candidates given, one by one, each a mapping of path -> value."""
        listed = []
        for c in candidates:
            if not isinstance(c, Mapping):
                raise ConfigError(
                    f"space: a candidate must be a mapping of path -> value, got {shown(c)}"
                )
            for path in c:
                check_path(path)
            listed.append(dict(c))
        _check_size(len(listed), f"{len(listed):,} candidates listed")
        return cls._of_part(_Listed(listed))

    @classmethod
    def coerce(cls, value: Space | Mapping[str, Any]) -> Space:
        """A Space from a Space, or a mapping read like a space file (:meth:`from_mapping`)."""
        if isinstance(value, Space):
            return value
        if isinstance(value, Mapping):
            return cls.from_mapping(value)
        raise ConfigError(
            f"space: expected a Space or a mapping of path -> values, got {type(value).__name__}"
        )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Space:
        """A space file's content: paths -> lists (the grid), and optionally ``zip:`` holding a
        mapping of paths -> lists of one length (paired), or a list of such mappings (each
        group paired); the grid and every group are combined as a product."""
        grid = {k: v for k, v in data.items() if k != ZIP_KEY}
        space = cls(grid)
        groups = data.get(ZIP_KEY, [])
        if isinstance(groups, Mapping):
            groups = [groups]
        for group in groups if isinstance(groups, list) else [groups]:
            if not isinstance(group, Mapping):
                raise ConfigError(
                    f"space: {ZIP_KEY}: expected a mapping of path -> list (or a list of "
                    f"them), got {shown(group)}"
                )
            space = space * cls.zip(group)
        return space

    @classmethod
    def load(cls, path: str | Path) -> Space:
        """A space from a YAML or JSON file (:meth:`from_mapping`); problems name the file."""
        path = Path(path)
        text = read_input(path, ConfigError, "space", max_line=MAX_LINE_BYTES)
        try:
            data = yaml_document(text.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise ConfigError(f"{path}: not UTF-8 text: {e}") from None
        except DocumentError as e:
            raise ConfigError(f"{path}: {e}") from None
        if not isinstance(data, Mapping) or not data:
            raise ConfigError(f"{path}: a space must be a mapping of path -> list of values")
        try:
            return cls.from_mapping(data)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None

    def __mul__(self, other: Space) -> Space:
        if not isinstance(other, Space):
            return NotImplemented
        both = set(self.paths) & set(other.paths)
        if both:
            raise ConfigError(
                f"space: a product sets {', '.join(sorted(both))} on both sides; "
                "zip the lists instead"
            )
        _check_size(len(self) * len(other), f"{len(self):,} x {len(other):,} candidates")
        return Space._of_part(_Product(self._part, other._part))

    def __add__(self, other: Space) -> Space:
        if not isinstance(other, Space):
            return NotImplemented
        _check_size(len(self) + len(other), f"{len(self):,} + {len(other):,} candidates")
        return Space._of_part(_Sum(self._part, other._part))

    def __len__(self) -> int:
        return len(self._part)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self._part.items()

    def __getitem__(self, i: int) -> dict[str, Any]:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"candidate {i} of a space of {n:,}")
        return self._part.item(i % n)

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path some candidate sets, in order of first appearance."""
        return tuple(dict.fromkeys(self._part.paths)) if len(self) else ()

    def configs(self, base: SimConfig) -> Iterator[SimConfig]:
        """Every candidate applied to ``base`` and validated, in order, each made when it is
        asked for (none is kept).

        Raises:
            ConfigError: the space is empty, or (when it is reached) a candidate is invalid
                (the message gives its number and settings, then the path and value that are
                wrong).
        """
        if not len(self):
            raise ConfigError("space: no candidates (an empty space)")
        dump = base.model_dump()
        for i, settings in enumerate(self):
            data = copy.deepcopy(dump)
            for path, value in settings.items():
                set_path(data, path, value)
            try:
                config = SimConfig.model_validate(data)
            except ConfigError as e:
                given = ", ".join(f"{p}={shown(v)}" for p, v in settings.items())
                raise ConfigError(f"space: candidate {i} ({given}): {e}") from None
            yield config

    def __repr__(self) -> str:
        return f"Space({len(self)} candidates over {', '.join(self.paths) or 'no paths'})"


__all__ = ["MAX_CANDIDATES", "ZIP_KEY", "Space", "check_path", "set_path"]
