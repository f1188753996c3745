"""The VRAM check preflight runs: the unit's argv and [env] -> per-GPU estimate -> fit on every GPU."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specd.gpu.fit import FitResult, fit_check, visible_devices
from specd.gpu.gguf import GgufInfo
from specd.gpu.nvml import NoGpu, Nvml, ProcessVram, probe_gpus, process_vram
from specd.gpu.settings import settings_from_argv
from specd.gpu.vram import estimate_per_gpu
from specd.profiles.flags import BinaryFlags


def vram_check(argv: Sequence[str], env: Mapping[str, str], model: GgufInfo, draft: GgufInfo | None,
               current_main_pid: int = 0, *, flags: BinaryFlags | None = None, nvml: Nvml | None = None
               ) -> FitResult:
    """Will `argv` (run with `env`) fit on the GPUs it will see, once the current server is stopped?"""
    settings = settings_from_argv(argv, env, flags)
    state = probe_gpus(nvml)
    if isinstance(state, NoGpu):
        return fit_check({}, state)
    devices = visible_devices(state, settings.visible_devices)
    per_gpu = estimate_per_gpu(model, draft, settings, len(devices), tuple(d.free_bytes for d in devices))
    freed: dict[int, int] = {}
    if current_main_pid > 0:
        held = process_vram(current_main_pid, nvml=nvml)
        if isinstance(held, ProcessVram):
            freed = dict(held.by_device)
    return fit_check(per_gpu, state, freed, visible=settings.visible_devices)
