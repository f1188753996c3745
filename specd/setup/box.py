"""Which box this is and what hardware it has: the part of `specd tune --json` and `specd status
--json` that makes results from several boxes comparable (same model, different GPUs?).

The name is the hostname unless `SPECD_BOX` names the box: several deployments on one host (or
test "boxes" sharing a machine) can then report distinct names, and an inventory name can be kept.
"""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from specd.gpu.nvml import GpuState, NoGpu, probe_gpus

BOX_ENV = "SPECD_BOX"


@dataclass(frozen=True)
class GpuSummary:
    index: int
    name: str
    uuid: str
    total_bytes: int


@dataclass(frozen=True)
class Hardware:
    cpu_model: str
    cpu_count: int
    memory_bytes: int
    gpus: tuple[GpuSummary, ...]
    gpu_driver: str | None
    cuda_version: str | None
    gpu_note: str | None  # why there is no GPU, when there is none


@dataclass(frozen=True)
class BoxIdentity:
    name: str
    hostname: str
    machine_id: str | None
    system: str  # kernel name and release, e.g. "Linux 6.1.0-18-amd64"
    hardware: Hardware

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["hardware"]["gpus"] = [asdict(gpu) for gpu in self.hardware.gpus]  # a list, as JSON reads back
        return data


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _machine_id() -> str | None:
    for path in (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id")):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text:
            return text
    return None


def hardware(gpus: GpuState | NoGpu | None = None) -> Hardware:
    """The CPU, memory and NVIDIA GPUs of this box (`gpus` for callers that probed already)."""
    state = probe_gpus() if gpus is None else gpus
    if isinstance(state, NoGpu):
        cards: tuple[GpuSummary, ...] = ()
        driver, cuda, note = None, None, state.reason
    else:
        cards = tuple(GpuSummary(d.index, d.name, d.uuid, d.total_bytes) for d in state.devices)
        driver, cuda, note = state.driver_version, state.cuda_version, None
    return Hardware(_cpu_model(), os.cpu_count() or 1, int(psutil.virtual_memory().total), cards, driver, cuda,
                    note)


def box_identity(gpus: GpuState | NoGpu | None = None) -> BoxIdentity:
    hostname = socket.gethostname()
    return BoxIdentity(
        name=os.environ.get(BOX_ENV) or hostname,
        hostname=hostname,
        machine_id=_machine_id(),
        system=f"{platform.system()} {platform.release()}",
        hardware=hardware(gpus),
    )
