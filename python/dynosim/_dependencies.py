"""Every optional dependency of dynosim, imported here and only here, on first use.

A feature that needs an extra calls one of these functions; when the package is missing it gets
:class:`~dynosim.errors.MissingExtraError` saying what to install. Nothing else in dynosim does
``try: import ...``, and ``import dynosim`` imports none of them.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from dynosim.errors import MissingExtraError

#: The Dynamo release the comparison was written and checked against (the ``compare`` extra).
DYNAMO_VERSION = "1.6.1"


def _require(module: str, package: str, extra: str, feature: str) -> ModuleType:
    try:
        # The top package first: a submodule imported earlier would be found even when the
        # package itself is now unimportable.
        importlib.import_module(module.partition(".")[0])
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtraError(
            f"{feature} needs {package}, which is not installed ({e}); "
            f"install it with: pip install 'dynosim[{extra}]'"
        ) from None


def aic_core(submodule: str = "") -> ModuleType:
    """``aiconfigurator_core`` (or one of its submodules, e.g. ``sdk.perf_database``): AIC's
    performance database, engine and models."""
    name = f"aiconfigurator_core.{submodule}" if submodule else "aiconfigurator_core"
    return _require(name, "AIConfigurator", "aic", "AIConfigurator timing and model data")


def aic_generator() -> ModuleType:
    """``aiconfigurator.generator.api``: AIC's deployment-artifact generator."""
    return _require(
        "aiconfigurator.generator.api", "AIConfigurator", "aic", "rendering a DGD manifest"
    )


def dynamo() -> ModuleType:
    """Dynamo's native module ``dynamo._core`` (its offline replay). Sets ``DYN_LOG=error``
    unless the caller chose a level: Dynamo logs every replay otherwise."""
    os.environ.setdefault("DYN_LOG", "error")
    return _require(
        "dynamo._core", f"ai-dynamo-runtime=={DYNAMO_VERSION}", "compare", "comparing with Dynamo"
    )


def pandas(feature: str, extra: str) -> ModuleType:
    """pandas, for ``feature`` (installed by the ``extra`` that needs it)."""
    return _require("pandas", "pandas", extra, feature)


def ray(feature: str) -> ModuleType:
    """Ray, for ``feature`` (the ``ray`` extra)."""
    return _require("ray", "Ray", "ray", feature)


def matplotlib() -> ModuleType:
    """``matplotlib`` with ``matplotlib.figure`` loaded, for plots (the ``plot`` extra);
    figures are drawn without pyplot, so no display backend is needed."""
    _require("matplotlib.figure", "matplotlib", "plot", "plots and HTML reports")
    return importlib.import_module("matplotlib")


__all__ = [
    "DYNAMO_VERSION",
    "aic_core",
    "aic_generator",
    "dynamo",
    "matplotlib",
    "pandas",
    "ray",
]
