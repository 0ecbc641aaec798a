"""Reading settings: a SimConfig from a model, a dict or a YAML / JSON file, and the JSON schema."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from dynosim._documents import DocumentError, yaml_document
from dynosim._files import MAX_LINE_BYTES, read_input
from dynosim.config.models import SimConfig
from dynosim.errors import ConfigError

_M = TypeVar("_M", bound=BaseModel)


def load_config(source: SimConfig | dict[str, Any] | str | Path | None = None) -> SimConfig:
    """A SimConfig from a model, a dict, or a YAML / JSON file path (None: all defaults)."""
    if source is None:
        return SimConfig()
    if isinstance(source, SimConfig):
        return source
    if isinstance(source, dict):
        return SimConfig.model_validate(source)
    if isinstance(source, str | Path):
        return load_settings_file(source, SimConfig, "configuration")
    raise ConfigError(
        "config: expected a SimConfig, a dict, a YAML/JSON file path or None, "
        f"got {type(source).__name__}"
    )


def load_settings_file(
    path: str | Path, model: type[_M], what: str, overrides: Mapping[str, Any] | None = None
) -> _M:
    """Validate a YAML / JSON file as ``model``; every problem is a ConfigError naming the file
    (``what`` names the document in messages, e.g. "configuration"). ``overrides`` (dotted
    path -> value) are set in the document first, so it is checked as it will run: a
    command line's ``--backend`` decides which engine settings the file may hold."""
    path = Path(path)
    try:
        text = read_input(path, ConfigError, what, max_line=MAX_LINE_BYTES).decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text: {e}") from None
    try:
        data = yaml_document(text) if text.strip() else {}
    except DocumentError as e:
        raise ConfigError(f"{path}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a {what} must be a mapping, got {type(data).__name__}")
    for dotted, value in (overrides or {}).items():
        _override(data, dotted.split("."), value)
    try:
        return model.model_validate(data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def _override(data: dict[str, Any], path: list[str], value: Any) -> None:
    """Set ``value`` at ``path`` in a document, making the mappings on the way (a part that is
    there but no mapping is left as it is, for the check to name)."""
    head, *rest = path
    if not rest:
        data[head] = value
        return
    if data.get(head) is None:
        data[head] = {}
    if isinstance(data[head], dict):
        _override(data[head], rest, value)


def config_json_schema() -> dict[str, Any]:
    """The JSON schema of SimConfig (for editors and YAML language servers)."""
    return SimConfig.model_json_schema()


__all__ = ["config_json_schema", "load_config", "load_settings_file"]
