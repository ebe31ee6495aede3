"""Hardware abstraction: Devices, their sEUs, the catalog and live construction."""

from scheduler_search.hardware.catalog import A100_SXM, CATALOG, H100_SXM, H200, get_device
from scheduler_search.hardware.live import device_from_properties
from scheduler_search.hardware.model import (
    HOPPER_CAPABILITIES,
    SEU,
    Capabilities,
    Device,
    UnitKind,
)

__all__ = [
    "A100_SXM",
    "CATALOG",
    "H100_SXM",
    "H200",
    "HOPPER_CAPABILITIES",
    "SEU",
    "Capabilities",
    "Device",
    "UnitKind",
    "device_from_properties",
    "get_device",
]
