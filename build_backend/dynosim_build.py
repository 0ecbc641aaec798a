"""dynosim's build backend: maturin's, with the Rust extension built profile-guided
(:mod:`pgo`) for about a minute more of building.

Where no profile can be made (a compiler not from rustup, no network to add llvm-tools, a
platform other than Linux or macOS, a step that fails) the build says why on stderr and
builds plainly. ``DYNOSIM_PGO=0`` in the environment builds plainly on purpose (a faster
rebuild while developing). ``dynosim._core.PROFILE_GUIDED`` says which build an install has.
Every other hook is maturin's own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import maturin
import pgo
from maturin import (
    build_sdist,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

#: The project root: PEP 517 runs the hooks there.
_ROOT = Path.cwd()


def get_requires_for_build_wheel(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    """maturin's requirements, and dynosim's own dependencies: the training replays import
    the package."""
    extra = _runtime_dependencies() if _wanted() else []
    return [*maturin.get_requires_for_build_wheel(config_settings), *extra]


get_requires_for_build_editable = get_requires_for_build_wheel


def build_wheel(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    return _profile_guided(
        lambda: maturin.build_wheel(wheel_directory, config_settings, metadata_directory)
    )


def build_editable(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    return _profile_guided(
        lambda: maturin.build_editable(wheel_directory, config_settings, metadata_directory)
    )


def _wanted() -> bool:
    return os.environ.get("DYNOSIM_PGO", "1") != "0"


def _profile_guided(build: Callable[[], str]) -> str:
    """``build()`` (maturin's) compiling with the training's profile, or plainly when no
    profile can be made."""
    if not _wanted():
        pgo.say("DYNOSIM_PGO=0: building without profile-guided optimisation")
        return build()
    given = os.environ.get("CARGO_TARGET_DIR")
    try:
        profile = pgo.train(_ROOT, (Path(given) if given else _ROOT / "target") / "pgo")
    except pgo.Unavailable as exc:
        pgo.say(f"building without profile-guided optimisation: {exc}")
        return build()
    pgo.say(f"building with the profile {profile}")
    # The extension's PROFILE_GUIDED reads DYNOSIM_PROFILE_GUIDED when it is compiled.
    env = pgo.rustflags_env(os.environ, f"-Cprofile-use={profile}")
    with _environment({**env, "DYNOSIM_PROFILE_GUIDED": "1"}):
        return build()


def _runtime_dependencies() -> list[str]:
    """``[project] dependencies`` of pyproject.toml, their one home."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: maturin requires tomli there
        import tomli as tomllib
    with open(_ROOT / "pyproject.toml", "rb") as fh:
        return list(tomllib.load(fh)["project"]["dependencies"])


@contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` replaced by ``env`` for the block (maturin's build inherits it)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]
