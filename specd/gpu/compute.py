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
CUDA_CONTEXT = 604 * MIB   # process VRAM minus llama.cpp's buffers, quantized weights (601-607 MiB)
CUBLAS = 100 * MIB         # extra once f16/bf16/f32 matrices or -fa off go through cuBLAS (697-713 in all)
PARTIAL_OFFLOAD = 40 * MIB  # extra compute buffer with some layers left on the CPU (39-40 MiB, 2 models)
NO_FA_EXTRA = 100 * 1024   # bytes per ubatch token live beside the KQ scores without flash attn (50 MiB)
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


def _activations(shape: ModelShape, ctx: Context, cells: int, k_width: int, v_width: int,
                 cache_type_k: str, cache_type_v: str, flash_attn: bool) -> int:
    """The larger of the FFN activations and the attention's own working set, for one ubatch."""
    ffn_width = max(shape.n_ff, shape.experts_used * shape.n_ff_expert + shape.n_ff_shared_expert)
    ffn = ctx.ubatch * 4 * 3 * (ffn_width + shape.n_embd)                  # f32 activations
    if flash_attn:
        converted = (k_width if cache_type_k != "f16" else 0) + (v_width if cache_type_v != "f16" else 0)
        attention = ctx.ubatch * 4 * 4 * shape.n_embd + cells * converted * 2 if converted else 0
    else:
        attention = cells * ctx.ubatch * shape.n_head * 4 + ctx.ubatch * NO_FA_EXTRA   # f32 KQ scores
    return max(ffn, attention)


def compute_bytes(tally: _Tally, shape: ModelShape, layout: WeightLayout, placement: LayerPlacement,
                  settings: ServerSettings, ctx: Context, flash_attn: bool, *, role: Role,
                  target: ModelShape | None = None) -> None:
    """Add the compute buffer of one context (and mark the GPUs that need cuBLAS) to `tally`."""
    draft = role == "draft"
    cache_k = settings.draft_cache_type_k if role != "target" else settings.cache_type_k
    cache_v = settings.draft_cache_type_v if role != "target" else settings.cache_type_v
    on_device: dict[int, list[int]] = {}
    for index, device in enumerate(placement.layer_device):
        kind = shape.layers[index]
        if device is not None and kind.mtp == (role == "mtp"):
            for target_device in (placement.devices if placement.split_mode == "tensor" else (device,)):
                on_device.setdefault(target_device, []).append(index)
    for device, indices in on_device.items():
        kinds = [shape.layers[index] for index in indices]
        full = ctx.cells if any(k.attention and not k.sliding for k in kinds) else 0
        swa = ctx.swa_cells(shape.sliding_window) if any(k.sliding for k in kinds) else 0
        k_width = max((shape.k_width(index) for index in indices if shape.layers[index].attention), default=0)
        v_width = max((shape.v_width(index) for index in indices if shape.layers[index].attention), default=0)
        masks = (full + swa) * ctx.ubatch * 2                                # f16 KQ masks
        tally.add(device, "compute", masks + _activations(shape, ctx, full or swa, k_width, v_width,
                                                          cache_k, cache_v, flash_attn))
        if layout.float_matrices or not flash_attn:
            tally.cublas.add(device)
    if role == "target" and placement.first_gpu_layer > 0 and placement.devices:
        tally.add(placement.devices[0], "compute", PARTIAL_OFFLOAD)
    if draft and shape.reads_target and target is not None and placement.output_device is not None:
        # the drafter's logits over the target's vocabulary, for a whole ubatch (prompt and decode graphs)
        tally.add(placement.output_device, "compute", 2 * ctx.ubatch * target.n_vocab * 4)
