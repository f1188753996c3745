"""Does a profile fit, on every GPU it uses? And if not, what is big and what to change.

The estimate is per CUDA device (the order the server sees); NVML reports devices in PCI order.
CUDA_VISIBLE_DEVICES in the profile's [env] picks and orders the devices the server sees (indices
or GPU-UUIDs); without it the server sees all, in the same order as NVML when CUDA_DEVICE_ORDER is
PCI_BUS_ID or the GPUs are alike (CUDA's default puts the fastest first).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from specd.errors import PreflightError
from specd.gpu.nvml import GIB, GpuDevice, GpuState, NoGpu
from specd.gpu.settings import SplitMode
from specd.gpu.vram import MIB, VramEstimate

HEADROOM = 256 * MIB


@dataclass(frozen=True)
class SplitMargin:
    """What the fit check adds to each GPU's estimate when a model is split over GPUs, and why."""

    fraction: float
    label: str           # what the check's line says it is for ("tensor split")
    basis: str           # where the figure comes from (a result file, a run)

    @property
    def percent(self) -> str:
        return f"+{self.fraction * 100:.0f}%"


# Per split mode, from the estimate's error per GPU on two H100s (benchmarks/results/gpu-vram.md): the
# smallest whole percent that lifts every held-out estimate to its measured peak, never below the
# margin set before the held-out run (3%, from the in-sample runs).
SPLIT_MARGINS: dict[str, SplitMargin] = {
    "layer": SplitMargin(0.03, "layer split", "held out (run held30, 2026-11-27): -0.6% .. +1.2% per GPU, 7 cases; "
                                              "in-sample (split2, fit30) -0.5% .. +0.1%"),
    "layer, host layers": SplitMargin(
        0.06, "layer split with layers in host memory",
        "held out (run held30, 2026-11-27): GPU 0 -4.8%, GPU 1 +0.1%, 1 case; in-sample (fit30) GPU 0 -2.6%"),
    "tensor": SplitMargin(0.03, "tensor split", "held out (run held30, 2026-11-27): -1.1% .. -0.1% per GPU, "
                                                "5 cases; in-sample (split2, fit30) -0.5% .. +0.4%"),
    "row": SplitMargin(0.10, "row split", "never measured: the pinned CUDA build cannot load row split"),
}


def split_margin(split_mode: SplitMode, gpus_used: int, *, host_layers: bool = False) -> SplitMargin | None:
    """The margin for a profile that puts one model on `gpus_used` GPUs with `split_mode` (none on
    one GPU, none for `-sm none`); `host_layers`: -ngl leaves layers in host memory."""
    if gpus_used < 2:
        return None
    if split_mode == "layer" and host_layers:
        return SPLIT_MARGINS["layer, host layers"]
    return SPLIT_MARGINS.get(split_mode)


@dataclass(frozen=True)
class FitResult:
    status: Literal["ok", "not_ok", "skipped"]
    message: str
    needed_bytes: int
    available_bytes: int | None
    hint: str | None = None

    @property
    def ok(self) -> bool:
        """False only when the profile is known not to fit (a skipped check does not block)."""
        return self.status != "not_ok"

    def raise_if_not_ok(self) -> None:
        if self.status == "not_ok":
            raise PreflightError(self.message, hint=self.hint)


def visible_devices(state: GpuState, visible: tuple[str, ...] | None) -> tuple[GpuDevice, ...]:
    """The NVML devices in the order the server's CUDA sees them (CUDA_VISIBLE_DEVICES applied)."""
    if visible is None:
        return state.devices
    chosen: list[GpuDevice] = []
    for entry in visible:
        if not entry:
            break                                   # CUDA stops at the first invalid entry
        match = [d for d in state.devices if (entry.isdigit() and d.index == int(entry))
                 or (not entry.isdigit() and d.uuid.startswith(entry))]
        if not match:
            break
        chosen.append(match[0])
    return tuple(chosen)


def _gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def advice(estimate: VramEstimate, short_by: int) -> tuple[str, str]:
    """(the biggest parts, what to change) for an estimate that is `short_by` bytes too big."""
    biggest = ", ".join(f"{name} {_gib(size)}" for name, size in estimate.parts()[:3])
    changes: list[str] = []
    kv = estimate.kv_bytes + estimate.draft_kv_bytes
    if kv:
        changes.append(f"a smaller ctx_size (the KV cache, {_gib(kv)}, shrinks in proportion)")
        changes.append("cache_type_k/cache_type_v = q8_0 (about half the KV cache of f16)")
    if estimate.recurrent_bytes > 64 * MIB:
        changes.append(f"fewer slots (parallel): the recurrent state, {_gib(estimate.recurrent_bytes)}, "
                       "is kept per slot")
    if estimate.expert_bytes:
        per_layer = estimate.expert_bytes / max(estimate.expert_layers, 1)
        # moving experts out brings a copy of one expert tensor (gate, up or down) in for prompts,
        # and the fit check keeps room for a second
        layers = min(-(-int(short_by + 2 * per_layer / 3) // max(int(per_layer), 1)), estimate.expert_layers)
        changes.append(f"args --n-cpu-moe {layers} or more (expert weights stay in host memory, "
                       f"~{_gib(per_layer)} per layer)")
    if estimate.gpu_layers:
        per_layer = (estimate.weights_bytes - estimate.expert_bytes) / estimate.gpu_layers
        layers = min(-(-short_by // max(int(per_layer), 1)), estimate.gpu_layers)
        changes.append(f"n_gpu_layers {layers} fewer (~{_gib(per_layer)} per layer)")
    if estimate.draft_weights_bytes:
        changes.append("the draft on another GPU (-devd) or a smaller draft")
    return biggest, "; or ".join(changes)


def fit_check(estimate: VramEstimate | Mapping[int, VramEstimate], gpu_state: GpuState | NoGpu,
              freed_by_current_server_bytes: int | Mapping[int, int] = 0, *, headroom_bytes: int = HEADROOM,
              visible: tuple[str, ...] | None = None, margin: SplitMargin | None = None) -> FitResult:
    """Does each GPU's share fit in its free VRAM plus what stopping the current server frees there?

    `estimate` is one GPU's (device 0) or a mapping CUDA index -> estimate; `freed` is bytes, or
    bytes per NVML index (ProcessVram.by_device of the running server). A model split over several
    GPUs needs its split mode's `margin` on top of each GPU's estimate (`split_margin`), and the
    message says so."""
    per_gpu = dict(estimate) if isinstance(estimate, Mapping) else {0: estimate}
    needed = sum(part.total_bytes for part in per_gpu.values())
    if isinstance(gpu_state, NoGpu):
        return FitResult("skipped", f"no NVIDIA GPU: VRAM check skipped ({gpu_state.reason})", needed, None)
    devices = visible_devices(gpu_state, visible)
    if isinstance(freed_by_current_server_bytes, Mapping):
        freed = {index: max(value, 0) for index, value in freed_by_current_server_bytes.items()}
    else:
        freed = {devices[0].index: max(freed_by_current_server_bytes, 0)} if devices else {}
    lines, failures, available_total = [], [], 0
    worst: tuple[int, VramEstimate] | None = None
    for cuda_index, part in sorted(per_gpu.items()):
        if cuda_index >= len(devices):
            return FitResult("not_ok", f"the profile uses CUDA device {cuda_index} but the server sees "
                             f"{len(devices)} GPU(s)", needed, None,
                             hint="check CUDA_VISIBLE_DEVICES in [env], --device, --main-gpu, --tensor-split")
        device = devices[cuda_index]
        available = device.free_bytes + freed.get(device.index, 0)
        available_total += available
        where = "after stopping the current server" if freed.get(device.index, 0) > 0 else "now"
        name = f"GPU {device.index} ({device.name})" if len(per_gpu) > 1 or len(gpu_state.devices) > 1 else ""
        split_bytes = int(part.total_bytes * margin.fraction) if margin else 0
        if margin:
            text = (f"{part.total_bytes / GIB:.1f} GiB estimated, {margin.percent} margin for {margin.label}, "
                    f"{available / GIB:.1f} of {device.total_bytes / GIB:.1f} GiB free {where}")
        else:
            text = f"needs ~{part.total_bytes / GIB:.1f} GiB, {available / GIB:.1f} GiB free {where}"
        lines.append(f"{name}: {text}" if name else text)
        required = part.total_bytes + split_bytes + max(headroom_bytes, part.margin_bytes)
        if required > available:
            failures.append(lines[-1])
            short = required - available
            if worst is None or short > worst[0]:
                worst = (short, part)
    message = "; ".join(lines)
    if worst is None:
        return FitResult("ok", message, needed, available_total)
    biggest, change = advice(worst[1], worst[0])
    return FitResult("not_ok", f"{'; '.join(failures)}: does not fit (biggest: {biggest})", needed,
                     available_total, hint=f"to fit, try {change}" if change else None)
