"""Typed simulation settings (pure data: no AIConfigurator here), how they are loaded, and the
view of them the replay reads."""

from dynosim.config.loading import config_json_schema, load_config, load_settings_file
from dynosim.config.models import (
    ENGINE_DEFAULTS,
    OP_TABLE_ARRAYS,
    TABLE_ARRAYS,
    TIMING_MODELS,
    AicTiming,
    ClusterConfig,
    EngineConfig,
    FixedTiming,
    KvShape,
    KvTransferConfig,
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
from dynosim.config.resolved import Resolved, RoleView, TransferView, resolve
from dynosim.config.timing_table import load_timing_table, save_timing_table

__all__ = [
    "ENGINE_DEFAULTS",
    "OP_TABLE_ARRAYS",
    "TABLE_ARRAYS",
    "TIMING_MODELS",
    "AicTiming",
    "ClusterConfig",
    "EngineConfig",
    "FixedTiming",
    "KvShape",
    "KvTransferConfig",
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
    "TimingConfig",
    "TransferView",
    "config_json_schema",
    "load_config",
    "load_settings_file",
    "load_timing_table",
    "resolve",
    "save_timing_table",
]
