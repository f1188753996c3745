"""FAKE NVML: devices and per-device process lists given by the test (no machine here has an NVIDIA
GPU, let alone two; the real backend is tested for its no-GPU answer in tests/unit/test_gpu.py)."""

from __future__ import annotations

from specd.gpu.nvml import GIB, GpuDevice, NvmlUnavailable


class FakeNvml:
    """A stand-in for NVML: devices and per-device process lists given by the test."""

    def __init__(self, devices: list[GpuDevice], processes: dict[int, list[tuple[int, int | None]]] | None = None,
                 fail_at: str | None = None) -> None:
        self.devices = devices
        self.process_lists = processes or {}
        self.fail_at = fail_at
        self.shutdowns = 0

    def _maybe_fail(self, step: str) -> None:
        if self.fail_at == step:
            raise NvmlUnavailable(f"fake failure in {step}")

    def init(self) -> None:
        self._maybe_fail("init")

    def shutdown(self) -> None:
        self.shutdowns += 1

    def driver_version(self) -> str:
        return "580.159.04"

    def cuda_version(self) -> str | None:
        return "13.0"

    def device_count(self) -> int:
        self._maybe_fail("count")
        return len(self.devices)

    def device(self, index: int) -> GpuDevice:
        self._maybe_fail("device")
        return self.devices[index]

    def processes(self, index: int) -> list[tuple[int, int | None]]:
        return self.process_lists.get(index, [])


def card(index: int, free_gib: float, total_gib: float = 24.0) -> GpuDevice:
    total, free = int(total_gib * GIB), int(free_gib * GIB)
    return GpuDevice(index, "NVIDIA GeForce RTX 3090 Ti", f"GPU-{index}", total, free, total - free)
