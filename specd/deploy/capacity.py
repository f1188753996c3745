"""Can the box hold the new server beside the running one? What `--strategy auto` asks.

A GPU profile fits beside the old server when specd's VRAM estimate (`specd.gpu.check`) fits in
each GPU's free memory *now* — nothing is counted as freed, since the old server keeps running.
A CPU profile (no NVIDIA GPU, or `-ngl 0`) fits when its host memory (the same estimate without
the CUDA runtime) fits in the RAM available now, and both servers' compute threads fit on the
cores this process may use: llama.cpp's thread pool spins at its barriers, so two pools sharing
cores slow each other far more than their share. Unknown (a model from the Hub, a launcher)
is "does not fit": `auto` then restarts, as it did before blue-green existed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

from specd.deploy.preflight import Preflight
from specd.errors import PreflightError, SpecdError
from specd.gpu.check import vram_check
from specd.gpu.fit import HEADROOM
from specd.gpu.gguf import GgufInfo, read_gguf_info
from specd.gpu.nvml import GIB, NoGpu, Nvml, probe_gpus
from specd.gpu.settings import settings_from_argv
from specd.gpu.vram import estimate_vram
from specd.unit.parse import UnitCommand, parse_unit


@dataclass(frozen=True)
class Capacity:
    fits: bool
    reason: str  # one line: what was compared, for the switch's notes and its history row


@dataclass(frozen=True)
class HostResources:
    """What the CPU check reads from the box; tests pass their own."""

    available_ram: Callable[[], int] = lambda: int(psutil.virtual_memory().available)
    cores: Callable[[], int] = lambda: len(os.sched_getaffinity(0))
    physical_cores: Callable[[], int] = lambda: psutil.cpu_count(logical=False) or os.cpu_count() or 1


# (the new server: a switch's preflight or a rollback's unit text, the running server's command) -> verdict
CapacityCheck = Callable[[Preflight | str, UnitCommand | None], Capacity]
Beside = Callable[[], Sequence[UnitCommand]]  # other servers that run too: routing's companions


def threads_of(argv: Sequence[str], env: Mapping[str, str], resources: HostResources) -> int:
    """The compute threads llama-server runs: -t/--threads, LLAMA_ARG_THREADS, else its default
    (the physical cores)."""
    value = UnitCommand(list(argv), dict(env)).option("--threads", "-t") or env.get("LLAMA_ARG_THREADS")
    try:
        threads = int(value) if value is not None else -1
    except ValueError:
        threads = -1
    return threads if threads > 0 else resources.physical_cores()


def both_fit(pre: Preflight, old: UnitCommand | None, *, nvml: Nvml | None = None,
             resources: HostResources | None = None, also: Sequence[UnitCommand] = ()) -> Capacity:
    """Does `pre`'s server fit beside the running `old` one (None: nothing runs) and `also`?"""
    return fits_beside(pre.argv, dict(pre.profile.env), pre.model_info, pre.draft_info, old, nvml=nvml,
                       resources=resources, also=also)


def capacity_check(nvml: Nvml | None = None, beside: Beside = lambda: ()) -> CapacityCheck:
    """The real check, for a preflight (`both_fit`) or a unit text (`text_fits`); `beside` names the
    other servers that keep running (routing's companions, specd.deploy.companions)."""
    def check(new: Preflight | str, old: UnitCommand | None) -> Capacity:
        also = beside()
        return (text_fits(new, old, nvml=nvml, also=also) if isinstance(new, str)
                else both_fit(new, old, nvml=nvml, also=also))
    return check


def text_fits(text: str, old: UnitCommand | None, *, where: str = "unit", nvml: Nvml | None = None,
              resources: HostResources | None = None, also: Sequence[UnitCommand] = ()) -> Capacity:
    """The same for a unit text (a rollback's): its model files are read from its command line."""
    command = parse_unit(text, where)
    infos: list[GgufInfo | None] = []
    for names in (("--model", "-m"), ("--spec-draft-model", "-md", "--model-draft")):
        path = command.option(*names)
        try:
            infos.append(read_gguf_info(Path(path)) if path else None)
        except SpecdError as exc:
            return Capacity(False, f"its memory cannot be estimated ({exc.message})")
    return fits_beside(command.argv, command.environment, infos[0], infos[1], old, nvml=nvml, resources=resources,
                       also=also)


def fits_beside(argv: Sequence[str], env: Mapping[str, str], model: GgufInfo | None, draft: GgufInfo | None,
                old: UnitCommand | None, *, nvml: Nvml | None = None,
                resources: HostResources | None = None, also: Sequence[UnitCommand] = ()) -> Capacity:
    """Does a server of `argv` (run with `env`) fit beside the running `old` one and the `also` ones?
    (On a GPU, free VRAM now already counts every server that runs; on the CPU their threads add up.)"""
    resources = resources or HostResources()
    if model is None:
        return Capacity(False, "its memory cannot be estimated (the model is not a local GGUF specd can read)")
    try:
        settings = settings_from_argv(argv, env)
    except PreflightError as exc:
        return Capacity(False, f"its memory cannot be estimated ({exc.message})")
    gpus = probe_gpus(nvml)
    if not isinstance(gpus, NoGpu) and settings.n_gpu_layers != 0:
        result = vram_check(argv, env, model, draft, 0, nvml=nvml)
        return Capacity(result.status == "ok", f"VRAM beside the running server: {result.message}")
    # the same parts in host memory: every layer counted (with -ngl 0 the VRAM estimate is all zero)
    on_host = replace(settings, n_gpu_layers=None, draft_n_gpu_layers=None)
    estimate = estimate_vram(model, draft, 0, None, settings=on_host)
    needed = estimate.total_bytes - estimate.runtime_bytes
    available = resources.available_ram()
    ram = f"host memory ~{needed / GIB:.2f} GiB of {available / GIB:.2f} GiB available"
    if needed + HEADROOM > available:
        return Capacity(False, f"{ram}: does not fit beside the running server")
    new_threads = threads_of(argv, env, resources)
    old_threads = threads_of(old.argv, old.environment, resources) if old is not None else 0
    companions = sum(threads_of(c.argv, c.environment, resources) for c in also)
    cores = resources.cores()
    beside = f" + {companions} (companions)" if also else ""
    threads = f"{old_threads}{beside} + {new_threads} threads on {cores} cores"
    if old_threads + companions + new_threads > cores:
        return Capacity(False, f"{ram}; {threads}: the two servers' thread pools would share cores "
                               "(set `threads` so both fit)")
    return Capacity(True, f"{ram}; {threads}")
