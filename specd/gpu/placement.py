"""Which GPU each layer of a model lands on, as llama.cpp decides it (llama-model.cpp load_tensors).

With `-ngl N` the last N-1 repeating layers and the output layer go to the GPUs, the first ones
stay in host memory. Among the GPUs, `--split-mode layer` (the default) and `row` cut the offloaded
layers at the cumulative `--tensor-split` proportions (default: each GPU's free memory); `none`
uses `--main-gpu` only. `row` then also spreads every 2-D matrix over all GPUs by the same
proportions; `tensor` (experimental in llama.cpp) spreads weights and KV of every layer.
A device index here is a CUDA index: the order of the GPUs the process sees (CUDA_VISIBLE_DEVICES).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from specd.errors import PreflightError
from specd.gpu.settings import ServerSettings, SplitMode


@dataclass(frozen=True)
class LayerPlacement:
    """Where a model's layers and output go; None is host memory."""

    devices: tuple[int, ...]                 # the GPUs this model uses, CUDA indices
    layer_device: tuple[int | None, ...]     # per block
    output_device: int | None
    shares: tuple[float, ...]                # per entry of `devices`: proportion for row/tensor split
    split_mode: SplitMode

    @property
    def first_gpu_layer(self) -> int:
        return next((index for index, device in enumerate(self.layer_device) if device is not None),
                    len(self.layer_device))

    @property
    def spread(self) -> bool:
        """Matrices (row) or everything (tensor) are spread over all `devices` by `shares`."""
        return self.split_mode in ("row", "tensor") and len(self.devices) > 1


def _shares(settings: ServerSettings, devices: tuple[int, ...], free: tuple[int, ...] | None) -> tuple[float, ...]:
    """Normalized proportions per device: --tensor-split, else free memory, else equal."""
    given = [settings.tensor_split[index] if index < len(settings.tensor_split) else 0.0 for index in devices]
    if not any(given) and settings.split_mode == "tensor":
        given = [1.0] * len(devices)          # the Meta device cuts evenly (llama_meta_device_get_split_state)
    elif not any(given):
        given = [float(free[index]) if free is not None and index < len(free) else 1.0 for index in devices]
        if not any(given):  # every GPU full: llama.cpp has nothing to weigh by; the estimate then says "no room"
            given = [1.0] * len(devices)
    total = sum(given)
    if total <= 0:
        raise PreflightError("--tensor-split gives every GPU a share of 0")
    return tuple(value / total for value in given)


def place_layers(n_layer_all: int, n_gpu_layers: int | None, settings: ServerSettings, gpu_count: int,
                 free: tuple[int, ...] | None = None, *, devices: tuple[int, ...] | None = None) -> LayerPlacement:
    """The device of every block and of the output layer, for `gpu_count` visible CUDA devices.

    `devices` overrides the settings' -dev list (a draft's -devd); `free` is each device's free memory,
    llama.cpp's default split when no --tensor-split is given."""
    chosen = devices if devices is not None else settings.devices
    usable = tuple(index for index in (chosen if chosen else range(gpu_count)) if index < gpu_count)
    if settings.split_mode == "none" and usable:
        if settings.main_gpu >= len(usable):
            raise PreflightError(f"--main-gpu {settings.main_gpu}: only {len(usable)} GPU(s) visible")
        usable = (usable[settings.main_gpu],)
    if not usable:
        return LayerPlacement((), (None,) * n_layer_all, None, (), settings.split_mode)
    shares = _shares(settings, usable, free)
    cumulative = [sum(shares[: index + 1]) for index in range(len(shares))]
    ngl = n_layer_all + 1 if n_gpu_layers is None else n_gpu_layers
    first = max(n_layer_all + 1 - ngl, 0)
    active = min(ngl, n_layer_all + 1)

    def device_of(index: int) -> int | None:
        if index < first or index - first >= active:
            return None
        position = bisect.bisect_right(cumulative, (index - first) / active)
        return usable[min(position, len(usable) - 1)]

    return LayerPlacement(usable, tuple(device_of(index) for index in range(n_layer_all)), device_of(n_layer_all),
                          shares, settings.split_mode)
