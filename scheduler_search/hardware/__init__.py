"""Hardware abstraction: Devices, their sEUs, the catalog and live construction."""

from scheduler_search.hardware.catalog import (
    A10,
    A40,
    A100_SXM,
    CATALOG,
    CODE_ARCHS,
    H100_SXM,
    H200,
    L40S,
    RTX_4090,
    get_device,
    running_code_of,
)
from scheduler_search.hardware.live import device_from_properties
from scheduler_search.hardware.model import (
    ADA_CAPABILITIES,
    AMPERE_CAPABILITIES,
    HOPPER_CAPABILITIES,
    SEU,
    Capabilities,
    Device,
    UnitKind,
)

__all__ = [
    "A10",
    "A40",
    "A100_SXM",
    "ADA_CAPABILITIES",
    "AMPERE_CAPABILITIES",
    "CATALOG",
    "CODE_ARCHS",
    "H100_SXM",
    "H200",
    "HOPPER_CAPABILITIES",
    "L40S",
    "RTX_4090",
    "SEU",
    "Capabilities",
    "Device",
    "UnitKind",
    "device_from_properties",
    "get_device",
    "running_code_of",
]
