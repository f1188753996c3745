"""How much VRAM a profile needs on each GPU (the estimate), from GGUF headers and server settings.

The arithmetic follows llama.cpp as vendored in llama-cpp-python 0.3.36:
- weights: see specd.gpu.layout and specd.gpu.placement; MTP (NextN) layers are loaded only for
  `--spec-type draft-mtp`; expert tensors of `--cpu-moe`/`--n-cpu-moe` layers stay in host memory.
- KV cache: n_ctx is padded to 256 (llama-context.cpp). With `-np` unset the server runs 4 slots
  on one unified cache of n_ctx cells; an explicit `-np N` (without --kv-unified) gives N streams
  of n_ctx/N cells. Sliding-window layers (iSWA, e.g. gemma3: 5 of 6 layers) hold only
  pad256(min(n_ctx_seq, n_swa * (unified ? n_seq : 1) + n_ubatch)) cells per stream.
- recurrent layers (hybrids such as qwen35) hold one f32 conv + state row per sequence instead,
  times 1 + n_rs_seq where speculation needs rollback snapshots (n_rs_seq = --spec-draft-n-max).
- a second context: the MTP head's (a KV cache of the NextN layers only) or a draft model's
  (its own weights, KV and state), both with the target's n_ctx; see specd.gpu.compute for the
  compute buffers and the CUDA runtime.
Every term is checked against llama.cpp's own buffer sizes and the process's VRAM on an H100
(benchmarks/gpu_vram/RESULTS.md).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from specd.errors import PreflightError
from specd.gpu.arch import ModelShape, model_shape
from specd.gpu.compute import (
    ALLREDUCE_FIRST,
    ALLREDUCE_MORE,
    CACHE_TYPE_BLOCKS,
    CUBLAS,
    CUDA_CONTEXT,
    EXTRA_CONTEXT,
    TENSOR_PARALLEL,
    Context,
    compute_bytes,
    context_of,
    row_bytes,
)
from specd.gpu.gguf import GgufInfo
from specd.gpu.layout import WeightLayout, approximate_layout, read_weight_layout
from specd.gpu.nvml import GIB
from specd.gpu.placement import LayerPlacement, place_layers
from specd.gpu.settings import ServerSettings
from specd.gpu.tensor_place import place_tensor_split

MIB = 1024**2
PARTS = ("weights", "kv", "recurrent", "compute", "runtime", "draft_weights", "draft_kv")


@dataclass(frozen=True)
class VramEstimate:
    """Bytes on one GPU, by part. A draft's (or the MTP head's) KV and state are `draft_kv`."""

    weights_bytes: int
    kv_bytes: int
    recurrent_bytes: int
    compute_bytes: int
    runtime_bytes: int
    draft_weights_bytes: int = 0
    draft_kv_bytes: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)
    expert_bytes: int = 0      # of weights_bytes, MoE expert tensors (what --n-cpu-moe moves)
    expert_layers: int = 0     # layers with experts on this GPU
    gpu_layers: int = 0        # target layers on this GPU (what -ngl counts)
    margin_bytes: int = 0      # more the server may take at times (a second host-tensor copy)

    @property
    def total_bytes(self) -> int:
        return (self.weights_bytes + self.kv_bytes + self.recurrent_bytes + self.compute_bytes
                + self.runtime_bytes + self.draft_weights_bytes + self.draft_kv_bytes)

    def parts(self) -> list[tuple[str, int]]:
        """(name, bytes) of each non-empty part, largest first: what a fit message names."""
        named = [("weights", self.weights_bytes), ("KV cache", self.kv_bytes),
                 ("recurrent state", self.recurrent_bytes), ("draft/MTP weights", self.draft_weights_bytes),
                 ("draft/MTP KV", self.draft_kv_bytes), ("compute", self.compute_bytes),
                 ("CUDA runtime", self.runtime_bytes)]
        return sorted((part for part in named if part[1] > 0), key=lambda part: -part[1])

    def describe(self) -> str:
        def gib(value: int) -> str:
            return f"{value / GIB:.1f}"

        parts = [f"weights {gib(self.weights_bytes)}", f"KV {gib(self.kv_bytes + self.recurrent_bytes)}"]
        if self.draft_weights_bytes or self.draft_kv_bytes:
            parts.append(f"draft {gib(self.draft_weights_bytes + self.draft_kv_bytes)}")
        parts.append(f"compute {gib(self.compute_bytes)}")
        parts.append(f"CUDA {gib(self.runtime_bytes)}")
        return f"needs ~{gib(self.total_bytes)} GiB: " + ", ".join(parts)


class _Tally:
    """Bytes per (device, part) while a profile's pieces are placed."""

    def __init__(self) -> None:
        self.bytes: defaultdict[int, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.notes: list[str] = []

    def add(self, device: int | None, part: str, amount: float) -> None:
        if device is not None and amount:
            self.bytes[device][part] += int(amount)

    def spread(self, placement: LayerPlacement, device: int | None, part: str, amount: int) -> None:
        """`amount` on `device`, or over all of the placement's GPUs by share when it spreads them."""
        if device is None:
            return
        if placement.spread:
            for index, share in zip(placement.devices, placement.shares, strict=True):
                self.add(index, part, amount * share)
        else:
            self.add(device, part, amount)

    def estimate(self, device: int) -> VramEstimate:
        found = self.bytes.get(device, defaultdict(int))
        return VramEstimate(found["weights"], found["kv"], found["recurrent"], found["compute"], found["runtime"],
                            found["draft_weights"], found["draft_kv"], tuple(self.notes), found["expert_bytes"],
                            found["expert_layers"], found["gpu_layers"], found["margin"])


def _cache_row(cache_type: str, width: int) -> int:
    return row_bytes(cache_type, width) if width else 0


def _place_model(tally: _Tally, info: GgufInfo, shape: ModelShape, layout: WeightLayout,
                 placement: LayerPlacement, settings: ServerSettings, ctx: Context, *, draft: bool) -> None:
    """Weights, KV and recurrent state of one model's main context (the target's, or a draft's)."""
    if placement.split_mode == "tensor" and placement.spread and info.tensors:
        place_tensor_split(tally, info, shape, placement, settings, ctx, draft=draft)
        return
    weights, kv_part = ("draft_weights", "draft_kv") if draft else ("weights", "kv")
    state_part = "draft_kv" if draft else "recurrent"
    cache_k = settings.draft_cache_type_k if draft else settings.cache_type_k
    cache_v = settings.draft_cache_type_v if draft else settings.cache_type_v
    rows = max(ctx.n_seq, 1) * (1 + (0 if draft or not shape.rs_rollback else settings.n_rs_seq))
    for index, kind in enumerate(shape.layers):
        device = placement.layer_device[index]
        if device is None or index >= len(layout.layer_bytes):
            continue
        if kind.mtp and (draft or not settings.mtp):
            continue                                       # TENSOR_SKIP unless draft-mtp
        experts = layout.experts_of(index) if settings.expert_on_cpu(index, draft=draft) else 0
        if not draft:
            tally.add(device, "gpu_layers", 1)
            on_gpu = layout.experts_of(index) - experts
            tally.add(device, "expert_bytes", on_gpu)
            tally.add(device, "expert_layers", 1 if on_gpu else 0)
        if placement.split_mode == "row" and placement.spread:
            matrices = layout.matrices_of(index)
            tally.add(device, weights, layout.layer_bytes[index] - experts - matrices)
            tally.spread(placement, device, weights, matrices)
        else:
            tally.spread(placement, device, weights, layout.layer_bytes[index] - experts)
        if kind.mtp:
            continue                                       # its cache belongs to the MTP context
        if kind.recurrent:
            tally.spread(placement, device, state_part, 4 * shape.recurrent_row * rows)
        elif kind.attention:
            cells = ctx.swa_cells(shape.sliding_window) if kind.sliding else ctx.cells
            row = _cache_row(cache_k, shape.k_width(index)) + _cache_row(cache_v, shape.v_width(index))
            tally.spread(placement, device, kv_part, row * cells * ctx.n_stream)
    if placement.output_device is not None:
        head = layout.output_bytes + (0 if layout.has_output_weight else layout.embedding_bytes)
        tally.spread(placement, placement.output_device, weights, head)


def _mtp_cache(tally: _Tally, info: GgufInfo, shape: ModelShape, placement: LayerPlacement,
               settings: ServerSettings, ctx: Context) -> None:
    """The MTP context's KV cache: the NextN layers only, the target's n_ctx, the draft cache types."""
    if placement.split_mode == "tensor" and placement.spread and info.tensors:
        place_tensor_split(tally, info, shape, placement, settings, ctx, draft=False, mtp_cache=True)
        return
    for index, kind in enumerate(shape.layers):
        if kind.mtp and placement.layer_device[index] is not None:
            row = (_cache_row(settings.draft_cache_type_k, shape.k_width(index))
                   + _cache_row(settings.draft_cache_type_v, shape.v_width(index)))
            tally.spread(placement, placement.layer_device[index], "draft_kv", row * ctx.cells * ctx.n_stream)


def _layout(info: GgufInfo, given: WeightLayout | None, notes: list[str]) -> WeightLayout:
    if given is not None:
        return given
    try:
        return read_weight_layout(info.path)
    except PreflightError as exc:
        notes.append(f"tensor table unread ({exc.message}); weights spread evenly over layers")
        return approximate_layout(info)


def estimate_per_gpu(model: GgufInfo, draft: GgufInfo | None, settings: ServerSettings, gpu_count: int = 1,
                     free: tuple[int, ...] | None = None, *, layout: WeightLayout | None = None,
                     draft_layout: WeightLayout | None = None) -> dict[int, VramEstimate]:
    """VRAM per GPU (CUDA index) for this profile on `gpu_count` visible GPUs with `free` bytes each."""
    tally = _Tally()
    if settings.mtp and not model.has_mtp:
        tally.notes.append("--spec-type draft-mtp on a model without MTP layers")
    shape, model_layout = model_shape(model), _layout(model, layout, tally.notes)
    # a quantized V cache and tensor split turn flash attention on (llama-context.cpp, llama.cpp)
    flash_attn = (settings.flash_attn or CACHE_TYPE_BLOCKS.get(settings.cache_type_v, (1, 0))[0] > 1
                  or settings.split_mode == "tensor")
    ctx = context_of(shape, settings.ctx_size, settings.n_parallel, settings.kv_unified, settings.n_ubatch)
    placement = place_layers(shape.n_layer_all, settings.n_gpu_layers, settings, gpu_count, free)
    _place_model(tally, model, shape, model_layout, placement, settings, ctx, draft=False)
    compute_bytes(tally, shape, model_layout, placement, settings, ctx, flash_attn, role="target")
    if settings.mtp and model.has_mtp:
        _mtp_cache(tally, model, shape, placement, settings, ctx)
        compute_bytes(tally, shape, model_layout, placement, settings, ctx, flash_attn, role="mtp")
    if draft is not None:
        dshape, dlayout = model_shape(draft), _layout(draft, draft_layout, tally.notes)
        dctx = context_of(dshape, ctx.n_ctx, settings.n_parallel, settings.kv_unified, settings.n_ubatch)
        dplace = place_layers(dshape.n_layer_all, settings.draft_n_gpu_layers, settings, gpu_count, free,
                              devices=settings.draft_devices)
        _place_model(tally, draft, dshape, dlayout, dplace, settings, dctx, draft=True)
        compute_bytes(tally, dshape, dlayout, dplace, settings, dctx, flash_attn, role="draft", target=shape)
    if 0 < placement.first_gpu_layer < shape.n_layer_all:
        tally.notes.append(f"partial offload: layers {placement.first_gpu_layer}..{shape.n_layer_all - 1} on the GPU")
    allreduce = settings.allreduce if settings.allreduce != "internal" or len(placement.devices) == 2 else "none"
    for device, found in sorted(tally.bytes.items()):
        parallel = found["tensor_contexts"]
        tally.add(device, "runtime", CUDA_CONTEXT + CUBLAS * found["cublas"]
                  + EXTRA_CONTEXT * max(found["contexts"] - 1, 0) + TENSOR_PARALLEL * parallel
                  + (ALLREDUCE_FIRST[allreduce] + ALLREDUCE_MORE[allreduce] * (parallel - 1) if parallel else 0))
    return {device: tally.estimate(device) for device in sorted(tally.bytes)} or {0: tally.estimate(0)}


def combined(per_gpu: Mapping[int, VramEstimate]) -> VramEstimate:
    """The whole process: each part summed over its GPUs (the one definition of a profile's total)."""
    parts = list(per_gpu.values())

    def total(name: str) -> int:
        return sum(int(getattr(part, name)) for part in parts)

    return VramEstimate(total("weights_bytes"), total("kv_bytes"), total("recurrent_bytes"), total("compute_bytes"),
                        total("runtime_bytes"), total("draft_weights_bytes"), total("draft_kv_bytes"),
                        parts[0].notes if parts else (), total("expert_bytes"),
                        max((part.expert_layers for part in parts), default=0),
                        max((part.gpu_layers for part in parts), default=0), total("margin_bytes"))


def estimate_vram(model: GgufInfo, draft: GgufInfo | None, ctx_size: int, n_gpu_layers: int | None,
                  cache_type_k: str = "f16", cache_type_v: str = "f16", n_parallel: int | None = None,
                  *, n_ubatch: int = 512, kv_unified: bool | None = None, flash_attn: bool = True,
                  draft_n_gpu_layers: int | None = None, draft_cache_type_k: str = "f16",
                  draft_cache_type_v: str = "f16", layout: WeightLayout | None = None,
                  draft_layout: WeightLayout | None = None, settings: ServerSettings | None = None) -> VramEstimate:
    """VRAM llama-server needs for this profile on one GPU, in bytes per part.

    ctx_size 0 means the model's training context; n_gpu_layers None or -1 means all layers;
    n_parallel None means the server's auto mode (4 slots, unified KV); flash_attn False is
    `-fa off`. `settings`, when given, replaces the loose arguments (MoE offload, MTP, ...)."""
    if settings is None:
        settings = ServerSettings(
            ctx_size=ctx_size, n_gpu_layers=None if n_gpu_layers is not None and n_gpu_layers < 0 else n_gpu_layers,
            cache_type_k=cache_type_k, cache_type_v=cache_type_v, n_parallel=n_parallel, n_ubatch=n_ubatch,
            kv_unified=kv_unified, flash_attn=flash_attn, draft_n_gpu_layers=draft_n_gpu_layers,
            draft_cache_type_k=draft_cache_type_k, draft_cache_type_v=draft_cache_type_v,
            spec_types=("draft-simple",) if draft is not None else ())
    one_gpu = ServerSettings(**{**settings.__dict__, "split_mode": "none", "main_gpu": 0, "devices": None,
                                "draft_devices": None})
    return estimate_per_gpu(model, draft, one_gpu, 1, layout=layout, draft_layout=draft_layout)[0]
