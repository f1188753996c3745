"""The VRAM check preflight runs: the unit's argv and [env] -> per-GPU estimate -> fit on every GPU.

Before it, a profile that asks for row or tensor split has its binary asked whether it can load the
model that way at all (specd.gpu.split_probe): a refusal stops the switch with the binary's words.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from specd.errors import PreflightError
from specd.gpu.arch import model_shape
from specd.gpu.fit import FitResult, SplitMargin, fit_check, split_margin, visible_devices
from specd.gpu.gguf import GgufInfo
from specd.gpu.nvml import GIB, NoGpu, Nvml, ProcessVram, probe_gpus, process_vram
from specd.gpu.placement import place_layers
from specd.gpu.settings import ServerSettings, settings_from_argv
from specd.gpu.split_probe import SplitProbe, binary_has_nccl, probe_split_mode
from specd.gpu.vram import VramEstimate, estimate_per_gpu
from specd.profiles.flags import BinaryFlags


def binary_path(word: str) -> Path:
    """argv[0] as a file: a path as written, else found on PATH."""
    found = shutil.which(word) if "/" not in word else None
    return Path(found or word)


def server_settings(argv: Sequence[str], env: Mapping[str, str], flags: BinaryFlags | None = None) -> ServerSettings:
    """The settings of `argv` run with `env`, with what the binary itself decides: a tensor split's
    AllReduce is NCCL's only where the binary brings NCCL (read from its bytes)."""
    settings = settings_from_argv(argv, env, flags)
    if settings.split_mode == "tensor" and settings.allreduce == "nccl" and argv \
            and not binary_has_nccl(binary_path(argv[0])):
        settings = replace(settings, allreduce="internal")
    return settings


def split_mode_probe(argv: Sequence[str], env: Mapping[str, str], model: GgufInfo,
                     flags: BinaryFlags | None = None) -> SplitProbe | None:
    """For row or tensor split: the binary's answer to whether it loads `model` so (None for the
    other split modes: every build loads them)."""
    settings = settings_from_argv(argv, env, flags)
    if settings.split_mode not in ("row", "tensor") or not argv:
        return None
    device_args: list[str] = []
    if settings.devices:
        device_args += ["-dev", ",".join(f"CUDA{index}" for index in settings.devices)]
    if settings.tensor_split:
        device_args += ["-ts", ",".join(f"{value:g}" for value in settings.tensor_split)]
    has = flags.has if flags is not None else (lambda flag: True)
    return probe_split_mode(binary_path(argv[0]), model.path, settings.split_mode, device_args=device_args,
                            env=env, verbose_flag="-lv" if has("-lv") else None,
                            fit_flag="-fit" if has("-fit") else None)


def split_mode_check(argv: Sequence[str], env: Mapping[str, str], model: GgufInfo,
                     flags: BinaryFlags | None = None) -> SplitProbe | None:
    """`split_mode_probe`, raising PreflightError with the binary's words when it refuses."""
    probe = split_mode_probe(argv, env, model, flags)
    if probe is not None and probe.verdict == "refused":
        raise PreflightError(f"{probe.describe()} (asked of {argv[0]} with {model.path.name})",
                             hint="use --split-mode layer (every build loads it), or a llama-server build that "
                                  f"supports {probe.mode} split")
    return probe


@dataclass(frozen=True)
class VramPlan:
    """The check's inputs and verdict, for a user who asks to see them (`specd show --vram`)."""

    settings: ServerSettings
    per_gpu: dict[int, VramEstimate]
    result: FitResult
    margin: SplitMargin | None = None

    def lines(self) -> list[str]:
        margin = self.margin
        found = [f"split mode: {self.settings.split_mode}"
                 + (f", --tensor-split {','.join(f'{v:g}' for v in self.settings.tensor_split)}"
                    if self.settings.tensor_split else "")]
        if self.settings.split_mode == "tensor" and len(self.per_gpu) > 1:
            found.append(f"tensor split's AllReduce: {self.settings.allreduce}")
        for index, part in sorted(self.per_gpu.items()):
            parts = ", ".join(f"{name} {size / GIB:.2f}" for name, size in part.parts())
            found.append(f"CUDA device {index}: {part.total_bytes / GIB:.2f} GiB estimated ({parts})")
        if margin is not None:
            found.append(f"margin: {margin.percent} of each GPU's estimate for {margin.label} ({margin.basis})")
        found.append(f"verdict: {self.result.message}")
        return found


def margin_for(settings: ServerSettings, model: GgufInfo, gpu_count: int) -> SplitMargin | None:
    """The fit check's margin for this profile's split over `gpu_count` visible GPUs
    (specd.gpu.fit.SPLIT_MARGINS): none unless the model itself is spread over more than one."""
    n_layer_all = model_shape(model).n_layer_all
    spread = place_layers(n_layer_all, settings.n_gpu_layers, settings, gpu_count)
    used = {device for device in (*spread.layer_device, spread.output_device) if device is not None}
    host_layers = settings.n_gpu_layers is not None and settings.n_gpu_layers <= n_layer_all
    return split_margin(settings.split_mode, len(used) if not spread.spread else len(spread.devices),
                        host_layers=host_layers)


def vram_plan(argv: Sequence[str], env: Mapping[str, str], model: GgufInfo, draft: GgufInfo | None,
              current_main_pid: int = 0, *, flags: BinaryFlags | None = None, nvml: Nvml | None = None
              ) -> VramPlan:
    """Will `argv` (run with `env`) fit on the GPUs it will see, once the current server is stopped?"""
    settings = server_settings(argv, env, flags)
    state = probe_gpus(nvml)
    if isinstance(state, NoGpu):
        return VramPlan(settings, {}, fit_check({}, state))
    devices = visible_devices(state, settings.visible_devices)
    per_gpu = estimate_per_gpu(model, draft, settings, len(devices), tuple(d.free_bytes for d in devices))
    freed: dict[int, int] = {}
    if current_main_pid > 0:
        held = process_vram(current_main_pid, nvml=nvml)
        if isinstance(held, ProcessVram):
            freed = dict(held.by_device)
    margin = margin_for(settings, model, len(devices))
    result = fit_check(per_gpu, state, freed, visible=settings.visible_devices, margin=margin)
    return VramPlan(settings, per_gpu, result, margin)


def vram_check(argv: Sequence[str], env: Mapping[str, str], model: GgufInfo, draft: GgufInfo | None,
               current_main_pid: int = 0, *, flags: BinaryFlags | None = None, nvml: Nvml | None = None
               ) -> FitResult:
    """Will `argv` (run with `env`) fit on the GPUs it will see, once the current server is stopped?"""
    return vram_plan(argv, env, model, draft, current_main_pid, flags=flags, nvml=nvml).result
