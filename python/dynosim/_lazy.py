"""Public names a package imports on first use (module ``__getattr__``, PEP 562), so that a
start (``dynosim --help``, say) imports only the modules it uses; and type checks that need no
import."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_names(
    package: str, names: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: each of ``names`` (public name ->
    the module defining it) is imported from its module on first use and kept in
    ``namespace`` (the package's globals), so the next use is a plain lookup."""

    def load(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(names[name]), name)
        namespace[name] = value
        return value

    def listing() -> list[str]:
        return sorted({*namespace, *names})

    return load, listing


def is_loaded_instance(value: Any, module_name: str, class_name: str) -> bool:
    """``isinstance(value, module.class)`` without importing the module: no instance of its
    class exists before it is imported."""
    module = sys.modules.get(module_name)
    return module is not None and isinstance(value, getattr(module, class_name))
