"""The hardware model: catalog figures, lookup, fingerprints and live devices."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest

from scheduler_search.hardware import (
    A10,
    A40,
    A100_SXM,
    ADA_CAPABILITIES,
    AMPERE_CAPABILITIES,
    CATALOG,
    H100_SXM,
    H200,
    HOPPER_CAPABILITIES,
    L40S,
    RTX_4090,
    Capabilities,
    Device,
    UnitKind,
    device_from_properties,
    get_device,
)
from workers.testing import H200_PROPS

GIB = 1 << 30

SOFTWARE = {"driver": "580.95", "cuda_runtime": "13.0", "cupy": "14.2.0", "codegen": "1"}


# --- catalog -----------------------------------------------------------------------------


def test_catalog_names() -> None:
    assert CATALOG == {"h100": H100_SXM, "h200": H200, "a100": A100_SXM, "a10": A10, "a40": A40,
                       "l40s": L40S, "rtx4090": RTX_4090}


@pytest.mark.parametrize("device", CATALOG.values(), ids=CATALOG.keys())
def test_catalog_figures_are_sane(device: Device) -> None:
    assert device.source == "datasheet"
    assert device.software == {}
    assert 70 <= device.sm_count <= 200
    assert 99 * 1024 <= device.smem_per_block_bytes <= device.smem_per_sm_bytes <= 256 * 1024
    assert device.regs_per_sm == 65536 and device.regs_per_thread_max == 255
    assert device.max_threads_per_block == 1024 < device.max_threads_per_sm
    assert 6 << 20 <= device.l2_bytes <= 96 << 20
    assert 24 * GIB <= device.memory_bytes <= 160 * GIB
    assert 1000 <= device.clock_mhz <= 2600
    assert 600 <= device.mem_bandwidth_gbps < device.l2_bandwidth_gbps
    assert set(device.tensor_flops_per_cycle_per_sm) >= {"float16", "bfloat16"}
    kinds = device.unit_kinds()
    assert len(set(kinds)) == len(kinds)
    assert {UnitKind.TENSOR_CORE, UnitKind.CUDA_CORE, UnitKind.SFU} <= set(kinds)
    for unit in device.units:
        assert unit.rate_per_cycle > 0 and unit.latency_cycles > 0 and unit.instruction


def test_h200_differs_from_h100_in_memory_bandwidth_l2_name_and_what_was_measured() -> None:
    differing = {
        f.name
        for f in dataclasses.fields(Device)
        if getattr(H100_SXM, f.name) != getattr(H200, f.name)
    }
    assert differing == {"name", "memory_bytes", "mem_bandwidth_gbps", "l2_bytes",
                         "resident_clusters"}
    # Clusters of 4 measured on the lent H200; pairs (and the unmeasured H100) fill the SMs.
    assert H200.clusters_at_once(4) == 30 and H100_SXM.clusters_at_once(4) == 33
    assert H200.clusters_at_once(2) == 66 and H200.clusters_at_once(1) == 132
    assert H200.memory_bytes > H100_SXM.memory_bytes
    assert H200.mem_bandwidth_gbps > H100_SXM.mem_bandwidth_gbps
    assert H200.l2_bytes == 60 << 20 and H100_SXM.l2_bytes == 50 << 20


@pytest.mark.parametrize(
    ("device", "tflops"), [(H100_SXM, 989.0), (H200, 989.0), (A100_SXM, 312.0), (A10, 125.0),
                           (A40, 149.7), (L40S, 362.05), (RTX_4090, 165.2)]
)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_dense_tensor_tflops_match_the_datasheet(device: Device, tflops: float, dtype: str) -> None:
    assert device.tensor_tflops(dtype) == pytest.approx(tflops, rel=0.01)
    assert device.unit(UnitKind.TENSOR_CORE).rate_per_cycle == (
        device.tensor_flops_per_cycle_per_sm[dtype])


@pytest.mark.parametrize(("device", "tflops"), [(H200, 1979.0), (L40S, 733.0),
                                                (RTX_4090, 330.3)])
def test_fp8_tensor_tflops_match_the_datasheet(device: Device, tflops: float) -> None:
    # The L40S datasheet's fp16 and FP8 figures imply clocks 1.2% apart; the catalog keeps
    # the fp16 one.
    assert device.tensor_tflops("float8_e4m3") == pytest.approx(tflops, rel=0.015)
    assert device.capabilities.fp8_mma


def test_each_architecture_states_its_capabilities() -> None:
    assert {d.arch: d.capabilities for d in CATALOG.values()} == {
        "sm_90a": HOPPER_CAPABILITIES, "sm_80": AMPERE_CAPABILITIES,
        "sm_86": AMPERE_CAPABILITIES, "sm_89": ADA_CAPABILITIES}
    ampere_class = [d for d in CATALOG.values() if d.compute_capability[0] == 8]
    assert all(d.capabilities.cp_async and d.capabilities.mma_sync for d in CATALOG.values())
    assert not any(d.capabilities.tma or d.capabilities.wgmma or d.capabilities.setmaxnreg
                   for d in ampere_class)
    assert [d.capabilities.fp8_mma for d in ampere_class] == [
        d.compute_capability == (8, 9) for d in ampere_class]
    assert all("float8_e4m3" in d.tensor_flops_per_cycle_per_sm
               for d in CATALOG.values() if d.capabilities.fp8_mma)


@pytest.mark.parametrize(
    ("device", "memory_gb", "bandwidth_gbps"),
    [(H100_SXM, 80, 3350), (H200, 141, 4800), (A100_SXM, 80, 2039), (A10, 24, 600),
     (A40, 48, 696), (L40S, 48, 864), (RTX_4090, 24, 1008)],
)
def test_memory_and_bandwidth_match_the_datasheet(
    device: Device, memory_gb: float, bandwidth_gbps: float
) -> None:
    # Datasheets give decimal GB for memory, rounded.
    assert device.memory_bytes / 1e9 == pytest.approx(memory_gb, rel=0.08)
    assert device.mem_bandwidth_gbps == pytest.approx(bandwidth_gbps, rel=0.01)


@pytest.mark.parametrize("device", [H100_SXM, H200])
def test_hopper_has_tma_and_wgmma(device: Device) -> None:
    assert device.arch == "sm_90a" and device.compute_capability == (9, 0)
    assert device.has_tma and device.capabilities == HOPPER_CAPABILITIES
    assert device.unit(UnitKind.TMA).is_async
    assert device.unit(UnitKind.TENSOR_CORE).is_async
    assert not device.unit(UnitKind.CUDA_CORE).is_async
    assert "wgmma" in device.unit(UnitKind.TENSOR_CORE).instruction
    with pytest.raises(KeyError, match="lsu"):
        device.unit(UnitKind.LSU)


def test_ampere_copies_through_the_lsu_and_has_sync_tensor_cores() -> None:
    device = A100_SXM
    assert device.arch == "sm_80" and device.compute_capability == (8, 0)
    assert not device.has_tma and device.capabilities == AMPERE_CAPABILITIES
    assert device.unit(UnitKind.LSU).is_async
    assert not device.unit(UnitKind.TENSOR_CORE).is_async
    with pytest.raises(KeyError, match="tma"):
        device.unit(UnitKind.TMA)


def test_devices_are_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        H200.sm_count = 1  # type: ignore[misc]


@pytest.mark.parametrize("device", CATALOG.values(), ids=CATALOG.keys())
def test_to_dict_is_plain_json(device: Device) -> None:
    data = device.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["name"] == device.name
    assert data["compute_capability"] == list(device.compute_capability)
    assert {u["kind"] for u in data["units"]} == {k.value for k in device.unit_kinds()}


# --- lookup ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "device"),
    [
        ("h200", H200),
        ("sim:h200", H200),
        ("H200", H200),
        ("SIM:H200", H200),
        ("sim:h100", H100_SXM),
        ("a100", A100_SXM),
    ],
)
def test_get_device(name: str, device: Device) -> None:
    assert get_device(name) is device


@pytest.mark.parametrize("name", ["h300", "sim:", "", "nvidia h200", "sim:sim:h200", "b200"])
def test_unknown_device_lists_the_choices(name: str) -> None:
    with pytest.raises(KeyError) as info:
        get_device(name)
    message = str(info.value)
    assert repr(name) in message
    for choice in ("a100", "h100", "h200"):
        assert choice in message


# --- fingerprint -------------------------------------------------------------------------


@pytest.mark.parametrize("device", CATALOG.values(), ids=CATALOG.keys())
def test_fingerprint_is_stable_sha256(device: Device) -> None:
    fingerprint = device.fingerprint()
    assert re.fullmatch(r"[0-9a-f]{64}", fingerprint)
    assert device.fingerprint() == fingerprint
    assert dataclasses.replace(device).fingerprint() == fingerprint


def test_catalog_devices_have_distinct_fingerprints() -> None:
    prints = {d.fingerprint() for d in CATALOG.values()}
    assert len(prints) == len(CATALOG)


@pytest.mark.parametrize("key", sorted(SOFTWARE))
def test_fingerprint_changes_with_each_software_version(key: str) -> None:
    base = dataclasses.replace(H200, software=dict(SOFTWARE))
    bumped = dataclasses.replace(H200, software={**SOFTWARE, key: SOFTWARE[key] + ".1"})
    assert base.fingerprint() != bumped.fingerprint()
    assert base.fingerprint() != H200.fingerprint()


def test_fingerprint_ignores_software_dict_order() -> None:
    forward = dataclasses.replace(H200, software=dict(SOFTWARE))
    backward = dataclasses.replace(H200, software=dict(reversed(list(SOFTWARE.items()))))
    assert forward.fingerprint() == backward.fingerprint()


@pytest.mark.parametrize(
    "change",
    [
        {"name": "NVIDIA H200 NVL"},
        {"compute_capability": (9, 1)},
        {"sm_count": 114},
        {"memory_bytes": 96 * GIB},
        {"l2_bytes": 50 << 20},
    ],
    ids=lambda c: next(iter(c)),
)
def test_fingerprint_changes_with_each_identifying_figure(change: dict[str, Any]) -> None:
    assert dataclasses.replace(H200, **change).fingerprint() != H200.fingerprint()


def test_identity_names_the_fields_of_the_device_key() -> None:
    identity = dataclasses.replace(H200, software=dict(SOFTWARE)).identity()
    assert identity == {
        "name": "NVIDIA H200",
        "compute_capability": [9, 0],
        "sm_count": 132,
        "memory_bytes": H200.memory_bytes,
        "l2_bytes": 60 << 20,
        "software": dict(sorted(SOFTWARE.items())),
    }


# --- live devices ------------------------------------------------------------------------


def test_device_from_h200_properties() -> None:
    device = device_from_properties(H200_PROPS, SOFTWARE)
    assert device.source == "live"
    assert device.name == "NVIDIA H200"
    assert device.arch == "sm_90a"
    assert device.compute_capability == (9, 0)
    assert device.sm_count == 132
    assert device.smem_per_sm_bytes == 233472
    assert device.smem_per_block_bytes == 232448
    assert device.regs_per_sm == 65536
    assert device.max_threads_per_block == 1024
    assert device.max_threads_per_sm == 2048
    assert device.l2_bytes == 60 << 20
    assert device.memory_bytes == 150754820096
    # DDR: 2 transfers per clock x 2.619 GHz x 768-byte bus.
    assert device.mem_bandwidth_gbps == pytest.approx(2 * 2.619e9 * 768 / 1e9, rel=1e-9)
    # What the properties do not tell comes from the H200 entry.
    assert device.tensor_flops_per_cycle_per_sm == H200.tensor_flops_per_cycle_per_sm
    assert device.tensor_tflops("float16") == pytest.approx(H200.tensor_tflops("float16"))
    assert device.units == H200.units
    assert device.has_tma and device.capabilities == HOPPER_CAPABILITIES
    assert device.software == SOFTWARE


def test_live_h200_matches_the_catalog_identity_but_not_its_fingerprint() -> None:
    live = device_from_properties(H200_PROPS, SOFTWARE)
    assert live.identity() == {**H200.identity(), "software": dict(sorted(SOFTWARE.items()))}
    assert live.fingerprint() != H200.fingerprint()
    again = device_from_properties(dict(H200_PROPS), dict(SOFTWARE))
    assert again.fingerprint() == live.fingerprint()


def test_live_fingerprint_changes_with_the_software_versions() -> None:
    first = device_from_properties(H200_PROPS, SOFTWARE)
    second = device_from_properties(H200_PROPS, {**SOFTWARE, "cupy": "14.3.0"})
    assert first.fingerprint() != second.fingerprint()


def test_device_name_may_be_str() -> None:
    device = device_from_properties({**H200_PROPS, "name": "NVIDIA H200"})
    assert device.name == "NVIDIA H200"
    assert device.software == {}


def test_device_from_h100_properties_uses_h100_rates() -> None:
    props = {
        **H200_PROPS,
        "name": b"NVIDIA H100 80GB HBM3",
        "l2CacheSize": 52428800,
        "totalGlobalMem": 85520809984,
        "memoryClockRate": 2619000,
        "memoryBusWidth": 5120,
    }
    device = device_from_properties(props)
    assert device.name == "NVIDIA H100 80GB HBM3"
    assert device.tensor_flops_per_cycle_per_sm == H100_SXM.tensor_flops_per_cycle_per_sm
    assert device.mem_bandwidth_gbps == pytest.approx(2 * 2.619e9 * 640 / 1e9)
    assert device.l2_bytes == 50 << 20


def test_device_from_a100_properties_is_sm80_without_tma() -> None:
    props = {
        **H200_PROPS,
        "name": b"NVIDIA A100-SXM4-80GB",
        "major": 8,
        "minor": 0,
        "multiProcessorCount": 108,
        "sharedMemPerMultiprocessor": 167936,
        "sharedMemPerBlockOptin": 166912,
        "l2CacheSize": 41943040,
        "memoryClockRate": 1593000,
        "memoryBusWidth": 5120,
    }
    device = device_from_properties(props)
    assert device.arch == "sm_80"
    assert device.compute_capability == (8, 0)
    assert not device.has_tma and device.capabilities == AMPERE_CAPABILITIES
    assert device.units == A100_SXM.units
    assert device.sm_count == 108


@pytest.mark.parametrize(("name", "minor", "family"), [
    ("NVIDIA A10", 6, A10), ("NVIDIA A40", 6, A40), ("NVIDIA RTX A6000", 6, A10),
    ("NVIDIA L40S", 9, L40S), ("NVIDIA L4", 9, L40S), ("NVIDIA GeForce RTX 4090", 9, RTX_4090),
])
def test_a_live_sm86_or_sm89_device_starts_from_its_class(name: str, minor: int,
                                                          family: Device) -> None:
    props = {**H200_PROPS, "name": name.encode(), "major": 8, "minor": minor,
             "multiProcessorCount": 58, "sharedMemPerMultiprocessor": 102400,
             "sharedMemPerBlockOptin": 101376}
    device = device_from_properties(props)
    assert device.arch == f"sm_8{minor}" and device.sm_count == 58
    assert device.units == family.units and device.capabilities == family.capabilities
    assert device.tensor_flops_per_cycle_per_sm == family.tensor_flops_per_cycle_per_sm
    assert device.smem_per_block_bytes == 101376


def test_missing_memory_clock_falls_back_to_the_catalog_bandwidth() -> None:
    device = device_from_properties({**H200_PROPS, "memoryClockRate": 0})
    assert device.mem_bandwidth_gbps == H200.mem_bandwidth_gbps


def test_a_gpu_past_hopper_is_offered_no_hopper_code() -> None:
    """Compute capability 10 runs no sm_90a code: the live device keeps the H100's figures
    for the cost model but states no capability, so code generation does not apply and
    its runs are tuned on the cost model (the check once compared ``cc >= 9.0``)."""
    from codegen import feasibility

    device = device_from_properties({**H200_PROPS, "name": "NVIDIA B200", "major": 10,
                                     "minor": 0})
    assert device.compute_capability == (10, 0)
    assert device.capabilities == Capabilities()
    assert feasibility("gemm", device) is None
    assert feasibility("gemm", H200) is not None
    assert device.identity()["name"] == "NVIDIA B200"


def test_capabilities_are_not_part_of_the_fingerprint() -> None:
    """A stated capability follows from the architecture the identity names already, so
    stating it changed no stored device key."""
    assert "capabilities" not in H200.identity()
    assert H200.fingerprint() == dataclasses.replace(
        H200, capabilities=Capabilities()).fingerprint()


def test_live_device_does_not_alter_the_catalog() -> None:
    before = H200.to_dict()
    device_from_properties(H200_PROPS, SOFTWARE)
    assert H200.to_dict() == before
    assert H200.source == "datasheet" and H200.software == {}
