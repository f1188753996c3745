"""The shape facts of a model that decide its memory, read from a GGUF header's metadata.

Each rule follows llama.cpp as vendored in llama-cpp-python 0.3.36 (file names below are under its
src/): which layers keep a KV cache (full or sliding-window attention), which keep a recurrent state
instead (hybrid models: llama-memory-hybrid with the filters of llama-model.cpp create_memory), how
big one sequence's state is (llama-hparams.cpp n_embd_r/n_embd_s), which layers are MTP (NextN)
layers, and the mixture-of-experts sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specd.gpu.gguf import GgufInfo

# default sliding-window pattern per architecture (llama.cpp src/models/*.cpp load_swa_pattern):
# every n-th layer has full attention; dense_first puts the full layer first
SWA_PATTERNS: dict[str, tuple[int, bool]] = {
    "gemma2": (2, False), "gemma3": (6, False), "gemma-embedding": (6, False), "gemma3n": (5, False),
    "cohere2": (4, False), "cohere2moe": (4, True), "exaone4": (4, False), "olmo2": (4, False),
    "llama4": (4, False), "gpt-oss": (2, False), "afmoe": (4, False), "smallthinker": (4, True),
    "plamo3": (8, False), "phi3": (1, False),
}
# hybrid architectures whose recurrent layers come from full_attention_interval (default 4) or an
# explicit attention.recurrent_layers array (src/models/qwen3next.cpp, qwen35.cpp, qwen35moe.cpp)
INTERVAL_HYBRIDS = frozenset({"qwen3next", "qwen35", "qwen35moe"})
# architectures that keep n_rs_seq snapshots of the recurrent state per sequence for speculative
# rollback (llama-arch.cpp llm_arch_supports_rs_rollback)
RS_ROLLBACK = frozenset({"kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h",
                         "nemotron_h_moe", "lfm2", "lfm2moe", "bailingmoe3"})
# a drafter whose context reads the target's hidden states and uses the target's output head
TARGET_READING_DRAFTERS = frozenset({"dflash", "eagle3"})


@dataclass(frozen=True)
class LayerKind:
    """What one block keeps per token or per sequence."""

    attention: bool       # has a K/V cache
    sliding: bool         # ... of the sliding window only
    recurrent: bool       # keeps a recurrent (conv + SSM/delta-net) state per sequence instead
    mtp: bool             # a NextN (MTP) layer: loaded only for --spec-type draft-mtp


@dataclass(frozen=True)
class ModelShape:
    architecture: str
    n_layer_all: int                 # block_count, MTP layers included (what -ngl counts)
    n_layer: int                     # trunk layers
    layers: tuple[LayerKind, ...]
    n_embd: int
    n_head: int
    head_kv: tuple[int, ...]         # per layer
    key_length: int
    value_length: int
    sliding_window: int
    recurrent_row: int               # f32 elements of one sequence's state in one recurrent layer
    ssm_conv_channels: int           # of a recurrent layer: q, k and v channels through the conv
    ssm_inner: int                   # of a recurrent layer: value channels
    n_ff: int                        # widest dense FFN
    experts: int
    experts_used: int
    n_ff_expert: int
    n_ff_shared_expert: int
    n_vocab: int
    context_length: int
    target_layers: int = 0           # a DFlash/EAGLE3 drafter: how many target layers it reads

    @property
    def rs_rollback(self) -> bool:
        return self.architecture in RS_ROLLBACK

    @property
    def reads_target(self) -> bool:
        return self.architecture in TARGET_READING_DRAFTERS

    def k_width(self, index: int) -> int:
        return self.key_length * self.head_kv[index]

    def v_width(self, index: int) -> int:
        return self.value_length * self.head_kv[index]


def _int(metadata: dict[str, Any], key: str, default: int = 0) -> int:
    value = metadata.get(key)
    if isinstance(value, list) and value and isinstance(value[0], (int, float)):
        return int(max(value))
    return int(value) if isinstance(value, (int, float)) else default


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


def _recurrent_layers(info: GgufInfo, n_layer_all: int, n_layer: int) -> list[bool]:
    arch = info.architecture
    explicit = info.metadata.get(f"{arch}.attention.recurrent_layers")
    if isinstance(explicit, list) and len(explicit) >= n_layer_all:
        return [bool(item) and index < n_layer for index, item in enumerate(explicit[:n_layer_all])]
    interval = info.metadata.get(f"{arch}.full_attention_interval")
    if not isinstance(interval, int) or interval <= 0:
        interval = 4 if arch in INTERVAL_HYBRIDS else 0
    if not interval:
        return [False] * n_layer_all
    return [index < n_layer and (index + 1) % interval != 0 for index in range(n_layer_all)]


def recurrent_row(metadata: dict[str, Any], arch: str) -> int:
    """f32 elements of one sequence's conv + SSM state in a recurrent layer (llama-hparams.cpp)."""
    conv, inner = _int(metadata, f"{arch}.ssm.conv_kernel"), _int(metadata, f"{arch}.ssm.inner_size")
    state, groups = _int(metadata, f"{arch}.ssm.state_size"), _int(metadata, f"{arch}.ssm.group_count")
    return max(conv - 1, 0) * (inner + 2 * groups * state) + state * inner


def vocab_size(info: GgufInfo) -> int:
    value = info.metadata.get(f"{info.architecture}.vocab_size")
    if isinstance(value, int):
        return value
    tokens = info.metadata.get("tokenizer.ggml.tokens")
    length = getattr(tokens, "length", None)
    if isinstance(length, int):
        return length
    return len(tokens) if isinstance(tokens, list) else 0


def model_shape(info: GgufInfo) -> ModelShape:
    """The memory-relevant shape of a model, from its header (no tensor data read)."""
    arch, meta = info.architecture, info.metadata
    n_layer_all = max(info.block_count or 0, 0)
    nextn = min(info.nextn_predict_layers, n_layer_all)
    n_layer = n_layer_all - nextn
    n_head = info.head_count or 1
    head_dim = (info.embedding_length or 0) // n_head
    swa = _swa_layers(info, n_layer_all)
    recurrent = _recurrent_layers(info, n_layer_all, n_layer)
    layers = tuple(LayerKind(attention=not recurrent[i], sliding=swa[i] and not recurrent[i],
                             recurrent=recurrent[i], mtp=i >= n_layer) for i in range(n_layer_all))
    n_embd = info.embedding_length or 0
    return ModelShape(
        architecture=arch, n_layer_all=n_layer_all, n_layer=n_layer, layers=layers, n_embd=n_embd,
        n_head=n_head, head_kv=tuple(_per_layer(info, "attention.head_count_kv", n_layer_all,
                                                 info.head_count_kv or n_head)),
        key_length=info.key_length or head_dim, value_length=info.value_length or head_dim,
        sliding_window=info.sliding_window or 0, recurrent_row=recurrent_row(meta, arch),
        ssm_conv_channels=_int(meta, f"{arch}.ssm.inner_size")
        + 2 * _int(meta, f"{arch}.ssm.group_count") * _int(meta, f"{arch}.ssm.state_size"),
        ssm_inner=_int(meta, f"{arch}.ssm.inner_size"),
        n_ff=max(_per_layer(info, "feed_forward_length", max(n_layer_all, 1), 4 * n_embd)),
        experts=_int(meta, f"{arch}.expert_count"), experts_used=_int(meta, f"{arch}.expert_used_count"),
        n_ff_expert=_int(meta, f"{arch}.expert_feed_forward_length"),
        n_ff_shared_expert=_int(meta, f"{arch}.expert_shared_feed_forward_length"),
        n_vocab=vocab_size(info), context_length=info.context_length or 4096,
        target_layers=len(layers_read) if isinstance(layers_read := meta.get(f"{arch}.target_layers"), list) else 0,
    )
