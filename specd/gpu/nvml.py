"""NVIDIA devices and the VRAM a process tree holds, read through NVML (pynvml).

Nothing here raises on a box without NVIDIA: `probe_gpus` and `process_vram` return `NoGpu` with a
one-line reason callers can print. Every NVML call sits behind the small `Nvml` protocol, so the
logic is tested with a fake and the real backend is tested for its no-GPU answer on any machine.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import psutil

GIB = 1024**3


@dataclass(frozen=True)
class GpuDevice:
    index: int
    name: str
    uuid: str
    total_bytes: int
    free_bytes: int
    used_bytes: int


@dataclass(frozen=True)
class GpuState:
    devices: tuple[GpuDevice, ...]
    driver_version: str
    cuda_version: str | None

    @property
    def free_bytes(self) -> int:
        return sum(device.free_bytes for device in self.devices)

    @property
    def total_bytes(self) -> int:
        return sum(device.total_bytes for device in self.devices)

    def describe(self) -> str:
        cuda = f", CUDA {self.cuda_version}" if self.cuda_version else ""
        cards = "; ".join(
            f"GPU {d.index} {d.name}: {d.free_bytes / GIB:.1f} of {d.total_bytes / GIB:.1f} GiB free"
            for d in self.devices
        )
        return f"driver {self.driver_version}{cuda}; {cards}"


@dataclass(frozen=True)
class NoGpu:
    """No usable NVIDIA GPU; `reason` is one line meant for the user."""

    reason: str

    def describe(self) -> str:
        return f"no NVIDIA GPU: {self.reason}"


@dataclass(frozen=True)
class ProcessVram:
    """VRAM held by a process and its descendants, as NVML reports it."""

    pid: int
    pids: tuple[int, ...]
    used_bytes: int
    by_device: tuple[tuple[int, int], ...]
    unreported_pids: tuple[int, ...] = ()

    def per_device(self) -> str:
        """One line for `specd status`: each GPU's share of the process tree, then the total."""
        if not self.by_device:
            text = "none on any GPU"
        else:
            shares = ", ".join(f"GPU {index} {used / GIB:.2f} GiB" for index, used in self.by_device)
            text = shares + (f" ({self.used_bytes / GIB:.2f} GiB in all)" if len(self.by_device) > 1 else "")
        if self.unreported_pids:
            text += f"; NVML hides the usage of PID {', '.join(map(str, self.unreported_pids))}"
        return text

    def describe(self) -> str:
        text = f"PID {self.pid}: {self.used_bytes / GIB:.2f} GiB of VRAM"
        if self.unreported_pids:
            text += f" (NVML hides the usage of PID {', '.join(map(str, self.unreported_pids))})"
        return text


class NvmlUnavailable(Exception):
    """Raised by an `Nvml` backend; the message is the one-line reason for `NoGpu`."""


class Nvml(Protocol):
    """The NVML calls specd makes; `PynvmlBackend` is the real one."""

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def driver_version(self) -> str: ...
    def cuda_version(self) -> str | None: ...
    def device_count(self) -> int: ...
    def device(self, index: int) -> GpuDevice: ...
    def processes(self, index: int) -> list[tuple[int, int | None]]:
        """(pid, used bytes or None when NVML withholds it) of compute and graphics processes."""
        ...


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_REASONS: dict[str, str] = {
    "NVMLError_LibraryNotFound": "the NVIDIA driver's NVML library (libnvidia-ml.so.1) is not installed",
    "NVMLError_DriverNotLoaded": "the NVIDIA kernel driver is not loaded",
    "NVMLError_NoPermission": "no permission to query the NVIDIA driver",
    "NVMLError_LibRmVersionMismatch": "the NVML library and the loaded kernel driver differ (reboot?)",
    "NVMLError_GpuIsLost": "the GPU fell off the bus (GPU is lost)",
}


class PynvmlBackend:
    """The real NVML, through the `pynvml` module (shipped by nvidia-ml-py)."""

    def __init__(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # the old 'pynvml' wheel warns on import
            try:
                import pynvml
            except ImportError as exc:
                raise NvmlUnavailable("the pynvml module (nvidia-ml-py) is not installed") from exc
        self._nvml: Any = pynvml

    def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        try:
            return function(*args)
        except self._nvml.NVMLError as exc:
            reason = _REASONS.get(type(exc).__name__, f"NVML error: {exc}")
            raise NvmlUnavailable(reason) from exc

    def init(self) -> None:
        self._call(self._nvml.nvmlInit)

    def shutdown(self) -> None:
        self._call(self._nvml.nvmlShutdown)

    def driver_version(self) -> str:
        return _text(self._call(self._nvml.nvmlSystemGetDriverVersion))

    def cuda_version(self) -> str | None:
        try:
            version = int(self._call(self._nvml.nvmlSystemGetCudaDriverVersion_v2))
        except NvmlUnavailable:
            return None
        return f"{version // 1000}.{version % 1000 // 10}"

    def device_count(self) -> int:
        return int(self._call(self._nvml.nvmlDeviceGetCount))

    def device(self, index: int) -> GpuDevice:
        handle = self._call(self._nvml.nvmlDeviceGetHandleByIndex, index)
        memory = self._call(self._nvml.nvmlDeviceGetMemoryInfo, handle)
        return GpuDevice(
            index=index,
            name=_text(self._call(self._nvml.nvmlDeviceGetName, handle)),
            uuid=_text(self._call(self._nvml.nvmlDeviceGetUUID, handle)),
            total_bytes=int(memory.total),
            free_bytes=int(memory.free),
            used_bytes=int(memory.used),
        )

    def processes(self, index: int) -> list[tuple[int, int | None]]:
        handle = self._call(self._nvml.nvmlDeviceGetHandleByIndex, index)
        found: list[tuple[int, int | None]] = []
        for query in (self._nvml.nvmlDeviceGetComputeRunningProcesses,
                      self._nvml.nvmlDeviceGetGraphicsRunningProcesses):
            for process in self._call(query, handle):
                used = process.usedGpuMemory
                found.append((int(process.pid), int(used) if used is not None else None))
        return found


T = TypeVar("T")


def _backend(nvml: Nvml | None) -> Nvml:
    return nvml if nvml is not None else PynvmlBackend()


def _with_nvml(nvml: Nvml | None, read: Callable[[Nvml, int], T]) -> T | NoGpu:
    """Init NVML, call `read(backend, device_count)`, shut down; NoGpu when any of it fails."""
    try:
        backend = _backend(nvml)
        backend.init()
    except NvmlUnavailable as exc:
        return NoGpu(str(exc))
    try:
        count = backend.device_count()
        if count == 0:
            return NoGpu("the NVIDIA driver is loaded but reports no GPU")
        return read(backend, count)
    except NvmlUnavailable as exc:
        return NoGpu(str(exc))
    finally:
        _quiet_shutdown(backend)


def probe_gpus(nvml: Nvml | None = None) -> GpuState | NoGpu:
    """Every NVIDIA device with its memory, or NoGpu saying why there is none."""
    return _with_nvml(nvml, lambda backend, count: GpuState(
        devices=tuple(backend.device(index) for index in range(count)),
        driver_version=backend.driver_version(),
        cuda_version=backend.cuda_version(),
    ))


def _quiet_shutdown(backend: Nvml) -> None:
    try:
        backend.shutdown()
    except NvmlUnavailable:
        return


def process_tree(pid: int) -> tuple[int, ...]:
    """`pid` and its live descendants; just `pid` if it is gone or hidden."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return (pid,)
    return (pid, *(child.pid for child in children))


def vram_of_pids(pid: int, pids: Iterable[int], per_device: dict[int, list[tuple[int, int | None]]]
                 ) -> ProcessVram:
    """Sum NVML's per-process usage over `pids` (pure: `per_device` maps device index to its list)."""
    wanted = set(pids)
    total = 0
    by_device: list[tuple[int, int]] = []
    hidden: set[int] = set()
    for index in sorted(per_device):
        seen: dict[int, int] = {}
        for process_id, used in per_device[index]:
            if process_id not in wanted:
                continue
            if used is None:
                hidden.add(process_id)
                continue
            seen[process_id] = max(seen.get(process_id, 0), used)  # listed as compute and graphics
        if seen:
            by_device.append((index, sum(seen.values())))
            total += sum(seen.values())
    return ProcessVram(pid=pid, pids=tuple(sorted(wanted)), used_bytes=total,
                       by_device=tuple(by_device), unreported_pids=tuple(sorted(hidden)))


def process_vram(pid: int, *, include_children: bool = True, nvml: Nvml | None = None
                 ) -> ProcessVram | NoGpu:
    """VRAM used by `pid` (a unit's MainPID) and, by default, its descendants, summed over GPUs.

    NVML reports PIDs of the host's PID namespace: inside a container they may not match.
    """
    pids = process_tree(pid) if include_children else (pid,)
    per_device = gpu_processes(nvml)
    if isinstance(per_device, NoGpu):
        return per_device
    return vram_of_pids(pid, pids, per_device)


def gpu_processes(nvml: Nvml | None = None) -> dict[int, list[tuple[int, int | None]]] | NoGpu:
    """Every process NVML lists, per device index: (PID, bytes used; None where NVML hides it)."""
    return _with_nvml(nvml, lambda backend, count: {index: backend.processes(index) for index in range(count)})
