"""Everything dynosim takes from AIConfigurator (AIC, the optional ``aic`` extra), the one place
that calls it: what its database holds (:mod:`~dynosim.aic.database`), which version's
measurements price each operation (:mod:`~dynosim.aic.versions`), a timing section resolved
against both (:mod:`~dynosim.aic.target`), step-time tables built from it
(:mod:`~dynosim.aic.tables`), model weights, KV dtypes and memory (:mod:`~dynosim.aic.models`),
and its deployment-artifact generator (:mod:`~dynosim.aic.generator`). Importing this package
does not import AIC; calling into it does, and raises MissingExtraError when AIC is missing."""

from dynosim.aic.database import (
    bundled_model_config,
    is_moe,
    supported_backends,
    supported_models,
    supported_tp,
    system_spec,
)
from dynosim.aic.tables import (
    aic_sections_to_tables,
    aic_table_timing,
    build_tables,
    default_cache_dir,
    ladder,
    refine_axis,
    table_cache_path,
)
from dynosim.aic.target import GRID_VERSION, AicTarget, resolve_aic_timing
from dynosim.aic.versions import aic_version, known_versions, pricing_versions
from dynosim.config import AicTiming

__all__ = [
    "GRID_VERSION",
    "AicTarget",
    "AicTiming",
    "aic_sections_to_tables",
    "aic_table_timing",
    "aic_version",
    "build_tables",
    "bundled_model_config",
    "default_cache_dir",
    "is_moe",
    "known_versions",
    "ladder",
    "pricing_versions",
    "refine_axis",
    "resolve_aic_timing",
    "supported_backends",
    "supported_models",
    "supported_tp",
    "system_spec",
    "table_cache_path",
]
