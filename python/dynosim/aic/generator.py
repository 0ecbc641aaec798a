"""AIConfigurator's deployment-artifact generator, called as it is: the parameters go in, the
artifacts AIC renders (``k8s_deploy.yaml`` and its companions) come out unchanged.

dynosim spells serving modes ``aggregated`` / ``disaggregated`` and roles ``aggregated`` /
``prefill`` / ``decode``; AIC spells them ``agg`` / ``disagg``. The translation happens here, at
the boundary, and nowhere else.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from dynosim._dependencies import aic_generator
from dynosim._shown import shown
from dynosim.errors import ConfigError, ManifestError

#: dynosim's serving modes and roles in AIC's words.
AIC_MODE = {"aggregated": "agg", "disaggregated": "disagg"}
AIC_ROLE = {"aggregated": "agg", "prefill": "prefill", "decode": "decode"}


def dynamo_release(requested: str | None, backend: str) -> tuple[str, str]:
    """The Dynamo release to render for (``requested``, else the installed AIC's default) and
    the version of ``backend`` that release ships.

    Raises:
        ConfigError: AIC does not know the release or the backend (AIC's words quoted).
    """
    api = aic_generator()
    release = requested or api.get_default_dynamo_version_mapping()[0]
    try:
        shipped = api.resolve_backend_version_for_dynamo(release, backend)
    except (TypeError, ValueError) as exc:  # AIC's words for an unknown release or backend
        raise ConfigError(f"options.dynamo_version {shown(release)}: {exc}") from None
    return release, shipped


class _Collect(logging.Handler):
    def __init__(self, messages: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.messages = messages

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.levelname.lower()}: {record.getMessage()}")


@contextmanager
def _aic_log() -> Iterator[list[str]]:
    """Collect AIC's warnings: it reports some failures (a manifest it could not build) only so."""
    messages: list[str] = []
    handler = _Collect(messages)
    loggers = [logging.getLogger(name) for name in ("aiconfigurator", "aiconfigurator_core")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield messages
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def generate(
    *,
    mode: str,
    backend: str,
    backend_version: str,
    release: str,
    roles: Mapping[str, tuple[int, dict[str, Any]]],
    service: dict[str, Any],
    k8s: dict[str, Any],
    gpus_per_node: int,
    sla: dict[str, int],
    model: dict[str, Any] | None = None,
) -> tuple[dict[str, str], list[str]]:
    """Render with AIC's ``collect_generator_params`` then ``generate_backend_artifacts``, with
    ``preserve_engine_limits`` so AIC keeps the engine limits given.

    ``roles`` maps each dynosim role to (workers, engine parameters); ``model`` is what AIC's
    rules read of the model (its ``ModelConfig``: ``is_moe`` makes them lay out the expert
    split given in the engine parameters). Returns the artifacts by file name, exactly as AIC
    returned them, and the warnings AIC logged.

    Raises:
        ManifestError: AIC's generator failed (its exception named), or returned no artifacts.
    """
    api = aic_generator()
    params = {f"{AIC_ROLE[role]}_params": p for role, (_, p) in roles.items()}
    workers = {f"{AIC_ROLE[role]}_workers": n for role, (n, _) in roles.items()}
    with _aic_log() as warnings:
        try:
            generator_params = api.collect_generator_params(
                service=service,
                k8s=k8s,
                **params,
                **workers,
                num_gpus_per_node=gpus_per_node,
                sla=sla,
                dyn_config={"mode": AIC_MODE[mode]},
                backend=backend,
                generator_dynamo_version=release,
            )
            generator_params["preserve_engine_limits"] = True
            if model is not None:
                generator_params["ModelConfig"] = model
            artifacts = api.generate_backend_artifacts(
                generator_params, backend, backend_version=backend_version
            )
        except Exception as exc:  # AIC's own failure, whatever its type: name it and re-raise
            raise ManifestError(
                f"AIC generator failed for the {mode} {backend} {backend_version} candidate: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    if not isinstance(artifacts, Mapping):
        artifacts = {}
    return dict(artifacts), warnings


__all__ = ["AIC_MODE", "AIC_ROLE", "dynamo_release", "generate"]
