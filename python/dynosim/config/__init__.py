"""Typed simulation settings (pure data: no AIConfigurator here), how they are loaded, and the
view of them the replay reads. The timing-table files' functions (numpy) load on first use."""

from typing import TYPE_CHECKING

from dynosim._lazy import lazy_names
from dynosim.config.loading import config_json_schema, load_config, load_settings_file
from dynosim.config.models import (
    DEFAULT_NUM_GPU_BLOCKS,
    ENGINE_DEFAULTS,
    LIMITS,
    OP_TABLE_ARRAYS,
    TABLE_ARRAYS,
    TIMING_MODELS,
    AicTiming,
    ClusterConfig,
    EngineConfig,
    FixedTiming,
    KvShape,
    KvTransferConfig,
    MixedDecodeAttention,
    OffloadConfig,
    OpTables,
    PolynomialTiming,
    ReportConfig,
    RoleConfig,
    SimConfig,
    SlaConfig,
    TableTiming,
    TimingConfig,
)
from dynosim.config.resolved import Resolved, RoleView, TierRates, TransferView, resolve

if TYPE_CHECKING:
    from dynosim.config.timing_table import (
        load_mixed_decode_profile,
        load_timing_table,
        save_timing_table,
    )

_TABLE_FILES = "dynosim.config.timing_table"
__getattr__, __dir__ = lazy_names(
    __name__,
    dict.fromkeys(
        ("load_mixed_decode_profile", "load_timing_table", "save_timing_table"), _TABLE_FILES
    ),
    globals(),
)

__all__ = [
    "DEFAULT_NUM_GPU_BLOCKS",
    "ENGINE_DEFAULTS",
    "LIMITS",
    "OP_TABLE_ARRAYS",
    "TABLE_ARRAYS",
    "TIMING_MODELS",
    "AicTiming",
    "ClusterConfig",
    "EngineConfig",
    "FixedTiming",
    "KvShape",
    "KvTransferConfig",
    "MixedDecodeAttention",
    "OffloadConfig",
    "OpTables",
    "PolynomialTiming",
    "ReportConfig",
    "Resolved",
    "RoleConfig",
    "RoleView",
    "SimConfig",
    "SlaConfig",
    "TableTiming",
    "TierRates",
    "TimingConfig",
    "TransferView",
    "config_json_schema",
    "load_config",
    "load_mixed_decode_profile",
    "load_settings_file",
    "load_timing_table",
    "resolve",
    "save_timing_table",
]
