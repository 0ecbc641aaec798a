"""Everything dynosim takes from AIConfigurator (AIC, the optional ``aic`` extra), the one place
that calls it: what its database holds (:mod:`~dynosim.aic.database`), step-time tables built
from it (:mod:`~dynosim.aic.tables`), model weights and KV dtypes (:mod:`~dynosim.aic.models`),
and its deployment-artifact generator (:mod:`~dynosim.aic.generator`). Importing this package
does not import AIC; calling into it does, and raises MissingExtraError when AIC is missing."""

from dynosim.aic.database import (
    GRID_VERSION,
    AicTarget,
    aic_version,
    bundled_model_config,
    resolve_aic_timing,
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
    "ladder",
    "refine_axis",
    "resolve_aic_timing",
    "supported_backends",
    "supported_models",
    "supported_tp",
    "system_spec",
    "table_cache_path",
]
