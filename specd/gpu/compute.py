"""The context a server builds (cells, streams, ubatch) and the CUDA compute buffers and runtime.

The KV arithmetic is exact (llama-kv-cache.cpp); the compute buffer is what ggml-alloc keeps live at
the graph's peak for one ubatch, modelled term by term and checked against llama.cpp's own
`CUDA0 compute buffer size` lines; the CUDA runtime (context, kernels, pools, cuBLAS) is what the
process holds beyond llama.cpp's buffers. Constants are measured on an H100 (driver 580, CUDA 13.0)
with llama-server 0.3.36 (benchmarks/gpu_vram/RESULTS.md) and will differ on other cards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from specd.errors import PreflightError
from specd.gpu.arch import ModelShape
from specd.gpu.expert_copies import expert_copies
from specd.gpu.layout import WeightLayout
from specd.gpu.placement import LayerPlacement
from specd.gpu.settings import ServerSettings

if TYPE_CHECKING:
    from specd.gpu.vram import _Tally

MIB = 1024**2
# (elements per block, bytes per block) of the KV cache types llama-server accepts (ggml.c type traits)
CACHE_TYPE_BLOCKS: dict[str, tuple[int, int]] = {
    "f32": (1, 4), "f16": (1, 2), "bf16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18),
    "q4_1": (32, 20), "iq4_nl": (32, 18), "q5_0": (32, 22), "q5_1": (32, 24),
}
KV_PAD = 256
DEFAULT_SLOTS = 4          # tools/server/server.cpp: -np unset (auto) -> 4 slots, unified KV
CUDA_CONTEXT = 604 * MIB   # process VRAM minus llama.cpp's buffers, quantized weights (601-609 MiB)
CUBLAS = 100 * MIB         # per context whose matrices go through cuBLAS: f16/bf16/f32 weights, -fa off
EXTRA_CONTEXT = 20 * MIB   # per further context on the device (an MTP head's, a draft's): 20-29 MiB measured
NO_FA_EXTRA = 100 * 1024   # bytes per ubatch token live beside the KQ scores without flash attn (50 MiB)
# Layer split over several GPUs with every layer offloaded runs llama.cpp's pipeline parallelism
# (llama-context.cpp): ggml's scheduler keeps GGML_SCHED_MAX_COPIES copies of each graph input (the
# KQ masks) and of each tensor a device receives from another (the hidden state), all live at once.
PIPELINE_COPIES = 4
# Tensor split: per context on the Meta device, what each GPU holds beyond buffers: the Meta backend's
# reduce buffers (measured with GGML_CUDA_ALLREDUCE=none: 20 MiB), and the AllReduce's own: NCCL's
# communicators (774 MiB per GPU for the first context and 500 MiB for each further one, measured on
# two NVLink-connected H100s with NCCL 2.28; fewer channels over PCIe need less) or llama.cpp's
# internal two-GPU pipeline (its 32 MB copy-engine scratch, ggml-cuda/allreduce.cu).
TENSOR_PARALLEL = 20 * MIB
ALLREDUCE_FIRST = {"nccl": 774 * MIB, "internal": 32 * 1000**2 + 12 * MIB, "none": 0}
ALLREDUCE_MORE = {"nccl": 500 * MIB, "internal": 32 * 1000**2 + 12 * MIB, "none": 0}
Role = Literal["target", "mtp", "draft"]


def row_bytes(cache_type: str, elements: int) -> int:
    """Bytes of one KV row of `elements` values in `cache_type` (block overhead included)."""
    if cache_type not in CACHE_TYPE_BLOCKS:
        raise PreflightError(f"unknown KV cache type '{cache_type}'",
                             hint="one of " + ", ".join(CACHE_TYPE_BLOCKS))
    block, size = CACHE_TYPE_BLOCKS[cache_type]
    return -(-elements // block) * size


def pad(value: int, multiple: int = KV_PAD) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class Context:
    n_ctx: int
    n_seq: int
    n_stream: int
    cells: int          # per stream, full-attention layers
    ubatch: int
    unified: bool

    def swa_cells(self, window: int) -> int:
        """Cells per stream of a sliding-window layer."""
        return pad(min(self.cells, window * (self.n_seq if self.unified else 1) + self.ubatch))


def context_of(shape: ModelShape, ctx_size: int, n_parallel: int | None, kv_unified: bool | None,
               n_ubatch: int) -> Context:
    n_ctx = pad(ctx_size if ctx_size > 0 else shape.context_length)
    n_seq = n_parallel if n_parallel and n_parallel > 0 else DEFAULT_SLOTS
    unified = kv_unified if kv_unified is not None else not (n_parallel and n_parallel > 0)
    if unified or n_seq == 1:
        return Context(n_ctx, n_seq, 1, n_ctx, min(n_ubatch, n_ctx), True)
    cells = pad(n_ctx // n_seq)
    return Context(cells * n_seq, n_seq, n_seq, cells, min(n_ubatch, n_ctx), False)


def activation_floats(shape: ModelShape, *, dense: bool, experts: bool, recurrent: bool) -> int:
    """f32 values per ubatch token live at the peak of a layer's FFN or recurrent mixer.

    Dense FFN: gate, up and their product (n_ff each) and the residual stream; MoE: the routed
    experts' outputs before and after weighting (n_embd per expert used), their gate/up/product
    (n_ff_expert), the shared expert and the router; gated delta-net: the q/k/v channels through
    the conv (three copies) and the value channels."""
    values = 0
    if dense and shape.n_ff:
        values = 3 * (shape.n_ff + shape.n_embd)
    if experts and shape.experts:
        values = max(values, 2 * shape.experts_used * shape.n_embd + 3 * shape.experts_used * shape.n_ff_expert
                     + 3 * shape.n_ff_shared_expert + 3 * shape.experts + 2 * shape.n_embd)
    if recurrent:
        values = max(values, 3 * shape.ssm_conv_channels + shape.ssm_inner)
    return values


def _peak(shape: ModelShape, ctx: Context, indices: list[int], cache_k: str, cache_v: str, flash_attn: bool,
          ) -> tuple[int, int]:
    """(f16 KQ masks, the larger of activations and attention's own working set) of layers on one device."""
    kinds = [shape.layers[index] for index in indices]
    full = ctx.cells if any(k.attention and not k.sliding for k in kinds) else 0
    swa = ctx.swa_cells(shape.sliding_window) if any(k.sliding for k in kinds) else 0
    attending = [index for index in indices if shape.layers[index].attention]
    recurrent = any(k.recurrent for k in kinds)
    floats = activation_floats(shape, dense=not shape.experts, experts=bool(shape.experts), recurrent=recurrent)
    activations = ctx.ubatch * 4 * floats
    attention = 0
    cells = full or swa
    if attending and flash_attn:
        converted = ((max(shape.k_width(i) for i in attending) if cache_k != "f16" else 0)
                     + (max(shape.v_width(i) for i in attending) if cache_v != "f16" else 0))
        if converted:   # the f16 copy of one layer's K and V (every stream) that flash attention reads
            mixer = max(4 * shape.n_embd, 3 * shape.ssm_conv_channels + shape.ssm_inner if recurrent else 0)
            attention = ctx.ubatch * 4 * mixer + cells * ctx.n_stream * converted * 2
    elif attending:
        attention = cells * ctx.ubatch * shape.n_head * 4 + ctx.ubatch * NO_FA_EXTRA   # f32 KQ scores
    return mask_bytes(shape, ctx, indices), max(activations, attention)


def mask_bytes(shape: ModelShape, ctx: Context, indices: list[int]) -> int:
    """The f16 KQ masks (full and sliding-window attention) of a graph over these layers."""
    kinds = [shape.layers[index] for index in indices]
    full = ctx.cells if any(k.attention and not k.sliding for k in kinds) else 0
    swa = ctx.swa_cells(shape.sliding_window) if any(k.sliding for k in kinds) else 0
    return (full + swa) * ctx.ubatch * 2


def pipeline_parallel(placement: LayerPlacement, settings: ServerSettings, n_layer_all: int, *, draft: bool) -> bool:
    """Does llama.cpp run this model's contexts with pipeline parallelism (llama-context.cpp)? Layer
    split over more than one device, every layer and the output offloaded, no tensor overrides
    (--cpu-moe/--n-cpu-moe are overrides)."""
    ngl = settings.draft_n_gpu_layers if draft else settings.n_gpu_layers
    overrides = (settings.draft_cpu_moe or settings.draft_n_cpu_moe > 0) if draft else (
        settings.cpu_moe or settings.n_cpu_moe > 0)
    return (placement.split_mode == "layer" and len(placement.devices) > 1
            and (ngl is None or ngl > n_layer_all) and not overrides)


def _layers_by_device(shape: ModelShape, placement: LayerPlacement, settings: ServerSettings, role: Role
                      ) -> tuple[dict[int, list[int]], list[int]]:
    """The layers of this context's graph on each device (every device for tensor split), and those
    left in host memory."""
    on_device: dict[int, list[int]] = {}
    host_layers: list[int] = []
    for index, device in enumerate(placement.layer_device):
        if shape.layers[index].mtp != (role == "mtp") or (shape.layers[index].mtp and not settings.mtp):
            continue
        if device is None:
            host_layers.append(index)
            continue
        for where in (placement.devices if placement.split_mode == "tensor" else (device,)):
            on_device.setdefault(where, []).append(index)
    return on_device, host_layers


def _count_context(tally: _Tally, device: int, placement: LayerPlacement, cublas: bool) -> None:
    """One more context on `device`: what the runtime term (specd.gpu.vram) counts."""
    tally.add(device, "contexts", 1)
    if placement.split_mode == "tensor" and placement.spread:
        tally.add(device, "tensor_contexts", 1)
    if cublas:
        tally.add(device, "cublas", 1)


def compute_bytes(tally: _Tally, shape: ModelShape, layout: WeightLayout, placement: LayerPlacement,
                  settings: ServerSettings, ctx: Context, flash_attn: bool, *, role: Role,
                  target: ModelShape | None = None) -> None:
    """Add the compute buffer and the runtime share of one context to `tally`.

    Weights left in host memory (layers past -ngl, experts of --cpu-moe/--n-cpu-moe layers) are
    copied to the GPU for prompt batches (ggml's op offload, one split per weight): the largest host
    layer tensor comes on top of the activations; expert copies are specd.gpu.expert_copies'."""
    draft = role == "draft"
    cache_k = settings.draft_cache_type_k if role != "target" else settings.cache_type_k
    cache_v = settings.draft_cache_type_v if role != "target" else settings.cache_type_v
    on_device, host_layers = _layers_by_device(shape, placement, settings, role)
    pipelined = pipeline_parallel(placement, settings, shape.n_layer_all, draft=draft)
    for device, indices in on_device.items():
        masks, peak = _peak(shape, ctx, indices, cache_k, cache_v, flash_attn)
        if role == "mtp":
            masks, peak = 0, ctx.ubatch * 4 * activation_floats(shape, dense=True, experts=True, recurrent=False)
        # weights in host memory are copied in for prompt batches: a partially offloaded model's
        # largest host tensor on top of the activations; experts of --cpu-moe layers: specd.gpu.expert_copies
        host_experts = [index for index in indices
                        if layout.experts_of(index) and settings.expert_on_cpu(index, draft=draft)]
        if role != "mtp" and placement.devices and device == placement.devices[0]:
            peak += max((layout.largest_of(index) for index in host_layers), default=0)
        if host_experts:
            copies = expert_copies(shape, ctx.ubatch, host_experts,
                                   max(layout.largest_expert_of(index) for index in host_experts), masks)
            peak = max(peak, copies.peak_bytes)
            tally.add(device, "margin", copies.margin_bytes)
        if draft and shape.reads_target and target is not None:
            # its logits over the target's vocabulary for a whole ubatch (prompt and decode graphs)
            masks, peak = 0, max(masks + peak, 2 * ctx.ubatch * target.n_vocab * 4) + ctx.ubatch * shape.n_embd * 4
        if pipelined:
            # the copies: masks, and the hidden state coming in (the MTP head takes two: the token
            # embeddings and the target's hidden state)
            hidden = ctx.ubatch * shape.n_embd * 4 * (2 if role == "mtp" else 1)
            peak += (PIPELINE_COPIES - 1) * mask_bytes(shape, ctx, indices) + PIPELINE_COPIES * hidden
        tally.add(device, "compute", masks + peak)
        _count_context(tally, device, placement, layout.float_matrices or not flash_attn)
    if draft and shape.reads_target and target is not None and placement.output_device is not None:
        # the target's hidden states at the layers the drafter reads (the target's graph grows by them)
        tally.add(placement.output_device, "compute", max(shape.target_layers - 1, 0) * ctx.ubatch * target.n_embd * 4)
