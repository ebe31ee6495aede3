"""Hardware abstraction: Devices, their sEUs, the catalog and live construction."""

from scheduler_search.hardware.catalog import A100_SXM, CATALOG, H100_SXM, H200, get_device
from scheduler_search.hardware.live import device_from_properties
from scheduler_search.hardware.model import SEU, Device, UnitKind

__all__ = [
    "A100_SXM",
    "CATALOG",
    "H100_SXM",
    "H200",
    "SEU",
    "Device",
    "UnitKind",
    "device_from_properties",
    "get_device",
]
