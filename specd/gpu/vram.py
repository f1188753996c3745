"""How much VRAM a profile needs (estimate) and whether it fits (fit check).

The arithmetic follows llama.cpp as vendored in llama-cpp-python 0.3.36:
- weights: `-ngl N` puts the last N-1 repeating layers and the output layer on the GPU
  (llama-model.cpp: i_gpu_start = n_layer + 1 - N); the token embedding always stays in host
  memory, and a model without `output.weight` (tied embeddings) gets a GPU copy of it as output.
- KV cache: n_ctx is padded to 256 (llama-context.cpp). With `-np` unset the server runs 4 slots
  on one unified cache of n_ctx cells; an explicit `-np N` (without --kv-unified) gives N streams
  of n_ctx/N cells. Sliding-window layers (iSWA, e.g. gemma3: 5 of 6 layers) hold only
  pad256(min(n_ctx_seq, n_swa * (unified ? n_seq : 1) + n_ubatch)) cells per stream.
- recurrent layers (hybrid models such as qwen35) hold f32 conv + state rows per sequence.
- compute: the CUDA compute buffer of one ubatch (flash attention on): the f16 KQ masks
  (cells x n_ubatch per cache), plus the larger of the FFN activations and, for a quantized cache,
  the f16 copy of one layer's K and V; without flash attention the f32 KQ scores instead.
- CUDA runtime: the context, kernels and pools of the process, plus cuBLAS when f16 matrices or
  attention without flash attention use it.
Every term was checked against llama.cpp's own buffer sizes and the process's VRAM on an H100
(benchmarks/gpu_vram/RESULTS.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Literal

from specd.errors import PreflightError
from specd.gpu.gguf import GgufInfo, Tensor, read_gguf_info
from specd.gpu.nvml import GIB, GpuState, NoGpu

MIB = 1024**2

# (elements per block, bytes per block) of the KV cache types llama-server accepts (ggml.c type traits)
CACHE_TYPE_BLOCKS: dict[str, tuple[int, int]] = {
    "f32": (1, 4), "f16": (1, 2), "bf16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18),
    "q4_1": (32, 20), "iq4_nl": (32, 18), "q5_0": (32, 22), "q5_1": (32, 24),
}
# default sliding-window pattern per architecture (llama.cpp src/models/*.cpp load_swa_pattern):
# every n-th layer has full attention; dense_first puts the full layer first
SWA_PATTERNS: dict[str, tuple[int, bool]] = {
    "gemma2": (2, False), "gemma3": (6, False), "gemma-embedding": (6, False), "gemma3n": (5, False),
    "cohere2": (4, False), "cohere2moe": (4, True), "exaone4": (4, False), "olmo2": (4, False),
    "llama4": (4, False), "gpt-oss": (2, False), "afmoe": (4, False), "smallthinker": (4, True),
    "plamo3": (8, False), "phi3": (1, False),
}
KV_PAD = 256
DEFAULT_SLOTS = 4          # tools/server/server.cpp: -np unset (auto) -> 4 slots, unified KV
DEFAULT_UBATCH = 512

# Measured on an H100 (driver 580, CUDA 13.0) with llama-server 0.3.36: benchmarks/gpu_vram/RESULTS.md
CUDA_CONTEXT = 604 * MIB   # process VRAM minus llama.cpp's buffers, quantized weights (601-607 MiB)
CUBLAS = 100 * MIB         # extra once f16/bf16/f32 matrices or -fa off go through cuBLAS (697-713 in all)
PARTIAL_OFFLOAD = 40 * MIB  # extra compute buffer with some layers left on the CPU (39-40 MiB, 2 models)
NO_FA_EXTRA = 100 * 1024   # bytes per ubatch token live beside the KQ scores without flash attn (50 MiB)
FLOAT_TYPES = {0, 1, 30}   # GGML F32, F16, BF16


@dataclass(frozen=True)
class WeightLayout:
    """Tensor bytes of a GGUF grouped by where llama.cpp places them."""

    layer_bytes: tuple[int, ...]
    input_bytes: int
    output_bytes: int
    has_output_weight: bool
    embedding_bytes: int
    n_vocab: int | None
    float_matrices: bool = False


@dataclass(frozen=True)
class VramEstimate:
    weights_bytes: int
    kv_bytes: int
    recurrent_bytes: int
    compute_bytes: int
    runtime_bytes: int
    draft_weights_bytes: int = 0
    draft_kv_bytes: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def total_bytes(self) -> int:
        return (self.weights_bytes + self.kv_bytes + self.recurrent_bytes + self.compute_bytes
                + self.runtime_bytes + self.draft_weights_bytes + self.draft_kv_bytes)

    def describe(self) -> str:
        def gib(value: int) -> str:
            return f"{value / GIB:.1f}"

        parts = [f"weights {gib(self.weights_bytes)}", f"KV {gib(self.kv_bytes + self.recurrent_bytes)}"]
        if self.draft_weights_bytes or self.draft_kv_bytes:
            parts.append(f"draft {gib(self.draft_weights_bytes + self.draft_kv_bytes)}")
        parts.append(f"compute {gib(self.compute_bytes)}")
        parts.append(f"CUDA {gib(self.runtime_bytes)}")
        return f"needs ~{gib(self.total_bytes)} GiB: " + ", ".join(parts)


@dataclass(frozen=True)
class FitResult:
    status: Literal["ok", "not_ok", "skipped"]
    message: str
    needed_bytes: int
    available_bytes: int | None

    @property
    def ok(self) -> bool:
        """False only when the profile is known not to fit (a skipped check does not block)."""
        return self.status != "not_ok"

    def raise_if_not_ok(self) -> None:
        if self.status == "not_ok":
            raise PreflightError(self.message, hint="lower ctx_size or n_gpu_layers, or quantize the KV "
                                                    "cache (cache_type_k/cache_type_v = q8_0)")


_BLOCK = re.compile(r"blk\.(\d+)\.")


@lru_cache(maxsize=32)
def _cached_layout(path: Path, size: int, mtime_ns: int) -> WeightLayout:
    return layout_of(read_gguf_info(path).tensors)


def layout_of(tensors: tuple[Tensor, ...]) -> WeightLayout:
    """Group tensor bytes by where llama-server places them: per repeating layer, input, output."""
    layers: dict[int, int] = {}
    input_bytes = output_bytes = embedding_bytes = 0
    has_output = floats = False
    n_vocab: int | None = None
    for tensor in tensors:
        block = _BLOCK.match(tensor.name)
        floats = floats or (block is not None and len(tensor.dims) >= 2 and tensor.ggml_type in FLOAT_TYPES)
        if block:
            layers[int(block.group(1))] = layers.get(int(block.group(1)), 0) + tensor.nbytes
        elif tensor.name.startswith("token_embd."):
            input_bytes += tensor.nbytes
            if tensor.name == "token_embd.weight":
                embedding_bytes = tensor.nbytes
                n_vocab = tensor.dims[1] if len(tensor.dims) > 1 else None
        else:
            output_bytes += tensor.nbytes
            has_output = has_output or tensor.name == "output.weight"
    per_layer = tuple(layers.get(index, 0) for index in range(max(layers, default=-1) + 1))
    return WeightLayout(per_layer, input_bytes, output_bytes, has_output, embedding_bytes, n_vocab, floats)


def read_weight_layout(path: Path) -> WeightLayout:
    """Group a GGUF's tensor bytes by placement (reads the header only; cached per file version)."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise PreflightError(f"{path}: no such model file") from exc
    return _cached_layout(path, stat.st_size, stat.st_mtime_ns)


def _approximate_layout(info: GgufInfo) -> WeightLayout:
    layers = max(info.block_count or 1, 1)
    share = info.tensor_bytes // layers
    return WeightLayout((share,) * layers, 0, info.tensor_bytes - share * layers, True, 0, _vocab(info),
                        info.file_type in (0, 1, 32))


def _vocab(info: GgufInfo) -> int | None:
    value = info.metadata.get(f"{info.architecture}.vocab_size")
    if isinstance(value, int):
        return value
    tokens = info.metadata.get("tokenizer.ggml.tokens")
    length = getattr(tokens, "length", None)
    if isinstance(length, int):
        return length
    return len(tokens) if isinstance(tokens, list) else None


def _per_layer(info: GgufInfo, suffix: str, n_layer: int, default: int) -> list[int]:
    value = info.metadata.get(f"{info.architecture}.{suffix}")
    if isinstance(value, list) and len(value) >= n_layer:
        return [int(item) for item in value[:n_layer]]
    if isinstance(value, (int, float)):
        return [int(value)] * n_layer
    return [default] * n_layer


def _swa_layers(info: GgufInfo, n_layer: int) -> list[bool]:
    if not info.sliding_window:
        return [False] * n_layer
    pattern = info.metadata.get(f"{info.architecture}.attention.sliding_window_pattern")
    if isinstance(pattern, list) and len(pattern) >= n_layer:
        return [bool(item) for item in pattern[:n_layer]]
    period, dense_first = SWA_PATTERNS.get(info.architecture, (1, False))
    if isinstance(pattern, int):
        period = pattern
    if dense_first:
        return [period == 0 or index % period != 0 for index in range(n_layer)]
    return [period == 0 or index % period < period - 1 for index in range(n_layer)]


def _recurrent_layers(info: GgufInfo, n_layer: int) -> list[bool]:
    interval = info.metadata.get(f"{info.architecture}.full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        return [(index + 1) % interval != 0 for index in range(n_layer)]
    return [False] * n_layer


def row_bytes(cache_type: str, elements: int) -> int:
    """Bytes of one KV row of `elements` values in `cache_type` (block overhead included)."""
    if cache_type not in CACHE_TYPE_BLOCKS:
        raise PreflightError(f"unknown KV cache type '{cache_type}'",
                             hint="one of " + ", ".join(CACHE_TYPE_BLOCKS))
    block, size = CACHE_TYPE_BLOCKS[cache_type]
    return -(-elements // block) * size


def _pad(value: int, multiple: int = KV_PAD) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class _Context:
    n_ctx: int
    n_seq: int
    n_stream: int
    cells: int          # per stream, full-attention layers
    ubatch: int
    unified: bool


def _context(info: GgufInfo, ctx_size: int, n_parallel: int | None, kv_unified: bool | None,
             n_ubatch: int) -> _Context:
    n_ctx = ctx_size if ctx_size > 0 else (info.context_length or 4096)
    n_seq = n_parallel if n_parallel and n_parallel > 0 else DEFAULT_SLOTS
    unified = kv_unified if kv_unified is not None else not (n_parallel and n_parallel > 0)
    n_ctx = _pad(n_ctx)
    if unified or n_seq == 1:
        return _Context(n_ctx, n_seq, 1, n_ctx, min(n_ubatch, n_ctx), True)
    cells = _pad(n_ctx // n_seq)
    return _Context(cells * n_seq, n_seq, n_seq, cells, min(n_ubatch, n_ctx), False)


def _gpu_layers(n_layer: int, n_gpu_layers: int | None) -> tuple[int, bool]:
    """(index of the first GPU layer, output on GPU) for `-ngl`; None/-1/'all' offload everything."""
    if n_gpu_layers is None or n_gpu_layers < 0:
        n_gpu_layers = n_layer + 1
    return max(n_layer + 1 - n_gpu_layers, 0), n_gpu_layers >= 1


def _weights(layout: WeightLayout, first_gpu: int, output_on_gpu: bool) -> int:
    total = sum(layout.layer_bytes[first_gpu:])
    if output_on_gpu:
        total += layout.output_bytes + (0 if layout.has_output_weight else layout.embedding_bytes)
    return total


@dataclass(frozen=True)
class _Cache:
    kv_bytes: int
    recurrent_bytes: int
    full_cells: int      # cells per stream of the full-attention cache, 0 if no such layer on the GPU
    swa_cells: int       # likewise for the sliding-window cache
    k_width: int         # widest K row (n_embd_k_gqa), elements
    v_width: int


def _cache(info: GgufInfo, ctx: _Context, first_gpu: int, cache_type_k: str, cache_type_v: str) -> _Cache:
    n_layer = (info.block_count or 0) - info.nextn_predict_layers   # MTP layers have their own context
    n_head = info.head_count or 1
    head_kv = _per_layer(info, "attention.head_count_kv", n_layer, info.head_count_kv or n_head)
    head_dim = (info.embedding_length or 0) // n_head
    key_length, value_length = info.key_length or head_dim, info.value_length or head_dim
    swa = _swa_layers(info, n_layer)
    recurrent = _recurrent_layers(info, n_layer)
    swa_cells = _pad(min(ctx.cells, (info.sliding_window or 0) * (ctx.n_seq if ctx.unified else 1)
                         + ctx.ubatch))
    kv = recurrent_bytes = k_width = v_width = 0
    has_full = has_swa = False
    state = _recurrent_row(info)
    for index in range(max(first_gpu, 0), n_layer):
        if recurrent[index]:
            recurrent_bytes += 4 * state * ctx.n_seq
            continue
        has_swa, has_full = has_swa or swa[index], has_full or not swa[index]
        k_width, v_width = max(k_width, key_length * head_kv[index]), max(v_width, value_length * head_kv[index])
        row = (row_bytes(cache_type_k, key_length * head_kv[index])
               + row_bytes(cache_type_v, value_length * head_kv[index]))
        kv += row * (swa_cells if swa[index] else ctx.cells) * ctx.n_stream
    return _Cache(kv, recurrent_bytes, ctx.cells if has_full else 0, swa_cells if has_swa else 0,
                  k_width, v_width)


def _recurrent_row(info: GgufInfo) -> int:
    """f32 elements of one sequence's conv + SSM state in a recurrent layer (llama-hparams.cpp)."""
    def key(suffix: str) -> int:
        value = info.metadata.get(f"{info.architecture}.{suffix}")
        return int(value) if isinstance(value, (int, float)) else 0

    conv, inner, state, groups = key("ssm.conv_kernel"), key("ssm.inner_size"), key("ssm.state_size"), \
        key("ssm.group_count")
    return max(conv - 1, 0) * (inner + 2 * groups * state) + state * inner


def _compute(info: GgufInfo, ctx: _Context, cache: _Cache, cache_type_k: str, cache_type_v: str,
             flash_attn: bool) -> int:
    """The CUDA compute buffer: what ggml-alloc keeps live at the graph's peak for one ubatch."""
    n_embd = info.embedding_length or 0
    n_ff = max(_per_layer(info, "feed_forward_length", max(info.block_count or 1, 1), 4 * n_embd))
    masks = (cache.full_cells + cache.swa_cells) * ctx.ubatch * 2               # f16 KQ masks
    ffn = ctx.ubatch * 4 * 3 * (n_ff + n_embd)                                  # f32 activations
    cells = cache.full_cells or cache.swa_cells
    if flash_attn:
        converted = ((cache.k_width if cache_type_k != "f16" else 0)
                     + (cache.v_width if cache_type_v != "f16" else 0))
        attention = ctx.ubatch * 4 * 4 * n_embd + cells * converted * 2 if converted else 0
    else:
        attention = cells * ctx.ubatch * (info.head_count or 1) * 4 + ctx.ubatch * NO_FA_EXTRA  # f32 KQ
    return masks + max(ffn, attention)


def estimate_vram(model: GgufInfo, draft: GgufInfo | None, ctx_size: int, n_gpu_layers: int | None,
                  cache_type_k: str = "f16", cache_type_v: str = "f16", n_parallel: int | None = None,
                  *, n_ubatch: int = DEFAULT_UBATCH, kv_unified: bool | None = None, flash_attn: bool = True,
                  draft_n_gpu_layers: int | None = None, draft_cache_type_k: str = "f16",
                  draft_cache_type_v: str = "f16", layout: WeightLayout | None = None,
                  draft_layout: WeightLayout | None = None) -> VramEstimate:
    """VRAM llama-server needs for this profile on one GPU, in bytes per component.

    ctx_size 0 means the model's training context; n_gpu_layers None or -1 means all layers;
    n_parallel None means the server's auto mode (4 slots, unified KV); flash_attn False is
    `-fa off` (auto turns it on with CUDA). Layouts are read from the files when not given; if a
    file cannot be read, weights are spread evenly over the layers.
    """
    notes: list[str] = []

    def layout_of(info: GgufInfo, given: WeightLayout | None) -> WeightLayout:
        if given is not None:
            return given
        try:
            return read_weight_layout(info.path)
        except PreflightError as exc:
            notes.append(f"tensor table unread ({exc.message}); weights spread evenly over layers")
            return _approximate_layout(info)

    model_layout = layout_of(model, layout)
    flash_attn = flash_attn or CACHE_TYPE_BLOCKS.get(cache_type_v, (1, 0))[0] > 1   # llama.cpp forces it
    ctx = _context(model, ctx_size, n_parallel, kv_unified, n_ubatch)
    first_gpu, output_on_gpu = _gpu_layers(model.block_count or 0, n_gpu_layers)
    weights = _weights(model_layout, first_gpu, output_on_gpu)
    cache = _cache(model, ctx, first_gpu, cache_type_k, cache_type_v)
    compute = _compute(model, ctx, cache, cache_type_k, cache_type_v, flash_attn)
    cublas = model_layout.float_matrices or not flash_attn
    if first_gpu > 0:
        compute += PARTIAL_OFFLOAD
    draft_weights = draft_kv = 0
    if draft is not None:
        dlayout = layout_of(draft, draft_layout)
        dctx = _context(draft, ctx.n_ctx, n_parallel, kv_unified, n_ubatch)   # same n_ctx as the target
        dfirst, doutput = _gpu_layers(draft.block_count or 0, draft_n_gpu_layers)
        draft_weights = _weights(dlayout, dfirst, doutput)
        dcache = _cache(draft, dctx, dfirst, draft_cache_type_k, draft_cache_type_v)
        draft_kv = dcache.kv_bytes + dcache.recurrent_bytes
        compute += _compute(draft, dctx, dcache, draft_cache_type_k, draft_cache_type_v, flash_attn)
        cublas = cublas or dlayout.float_matrices
    if first_gpu > 0:
        notes.append(f"partial offload: layers {first_gpu}..{(model.block_count or 0) - 1} on the GPU")
    runtime = CUDA_CONTEXT + (CUBLAS if cublas else 0)
    return VramEstimate(weights, cache.kv_bytes, cache.recurrent_bytes, compute, runtime, draft_weights,
                        draft_kv, tuple(notes))


def fit_check(estimate: VramEstimate, gpu_state: GpuState | NoGpu, freed_by_current_server_bytes: int = 0,
              *, headroom_bytes: int = 256 * MIB) -> FitResult:
    """Does the estimate fit in free VRAM plus what stopping the current server frees?"""
    needed = estimate.total_bytes
    if isinstance(gpu_state, NoGpu):
        return FitResult("skipped", f"no NVIDIA GPU: VRAM check skipped ({gpu_state.reason})", needed, None)
    available = gpu_state.free_bytes + max(freed_by_current_server_bytes, 0)
    where = "after stopping the current server" if freed_by_current_server_bytes > 0 else "now"
    cards = f" on {len(gpu_state.devices)} GPUs" if len(gpu_state.devices) > 1 else ""
    message = f"needs ~{needed / GIB:.1f} GiB, {available / GIB:.1f} GiB free{cards} {where}"
    if needed + headroom_bytes > available:
        return FitResult("not_ok", f"{message}: does not fit ({estimate.describe()})", needed, available)
    return FitResult("ok", message, needed, available)
