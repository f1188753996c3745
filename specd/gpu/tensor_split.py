"""What `--split-mode tensor` puts on each GPU: llama.cpp's "Meta" device, tensor by tensor.

With tensor split llama.cpp (vendored in llama-cpp-python 0.3.36) builds one Meta device over the
GPUs and cuts every weight and cache tensor along one axis (llama-model.cpp
`llama_meta_device_get_split_state`): attention Q/K/V and FFN up/gate by their output rows, attention
output and FFN down by their input columns, the KV cache by heads, the delta-net state by heads; norms,
routers, shared experts and a tied output head (a duplicate of `token_embd.weight`) are mirrored on
every GPU. Each cut is rounded down to a granularity (whole heads, whole quantization blocks, a
multiple of 128 for FFN rows) at the cumulative `--tensor-split` proportions, and which GPU takes the
rounding turns from layer to layer (a "rotation" counted over layers of the same kind), so a GPU's
share of a model is not its `--tensor-split` share: moe35's 512-row experts at 2:1 come out 5:3.
Without `--tensor-split` the cut is even (not by free memory, as layer split does).

The model's log prints one line for the Meta device; measured per GPU on two H100s this arithmetic
gives each GPU's weights and cache to the MiB (benchmarks/gpu_vram/RESULTS.md, run fit30).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from specd.gpu.arch import ModelShape
from specd.gpu.gguf import GgufInfo, Tensor
from specd.gpu.layout import EXPERT_TENSOR

MIRRORED = -1
_QWEN_GATED = frozenset({"qwen3next", "qwen35", "qwen35moe", "qwen4exp"})   # [TAG_SPLIT_QGATE_QWEN]
_BLOCK = re.compile(r"blk\.(\d+)\.(.+)$")


def _match(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


# (pattern of the name after "blk.N.", axis, the tensor of the same layer whose type sets the block size
# (None: the tensor itself), a fallback for that tensor): llama_meta_device_get_split_state's table
_RULES: tuple[tuple[re.Pattern[str], int, str | None, str | None], ...] = tuple(
    (_match(pattern), axis, reference, fallback) for pattern, axis, reference, fallback in (
        (r"attn_q.weight|attn_(k|v).weight", 1, "attn_output.weight", "ssm_out.weight"),
        (r"attn_q\.bias|attn_(k|v)\.bias", 0, "attn_output.weight", "ssm_out.weight"),
        (r"attn_qkv.weight", 1, "attn_output.weight", "ssm_out.weight"),
        (r"attn_qkv.bias", 0, "attn_output.weight", "ssm_out.weight"),
        (r"attn_(q|k)_norm\.weight", 1, "attn_output.weight", None),        # mirrored when 1-D
        (r"attn_sinks.weight", 0, "attn_output.weight", None),
        (r"attn_output.weight", 0, None, None),
        (r"attn_output.bias", MIRRORED, None, None),
        (r"attn_gate.weight", 1, "attn_output.weight", "ssm_out.weight"),
        (r"ssm_dt.bias|ssm_a", 0, "ssm_out.weight", None),
        (r"ssm_alpha.weight|ssm_beta.weight|ssm_ba.weight", 1, "ssm_out.weight", None),
        (r"ssm_conv1d.weight", 1, "ssm_out.weight", None),
        (r"ssm_out.weight", 0, None, None),
        (r"ffn_up(_exps)?.weight|ffn_gate(_exps)?.weight", 1, "ffn_down.weight", "ffn_down_exps.weight"),
        (r"ffn_up(_exps)?.bias|ffn_gate(_exps)?.bias", 0, "ffn_down.weight", "ffn_down_exps.weight"),
        (r"ffn_gate_up(_exps)?.weight", 1, "ffn_down.weight", "ffn_down_exps.weight"),
        (r"ffn_down(_exps)?.weight", 0, "ffn_down.weight", "ffn_down_exps.weight"),
        (r"ffn_down.bias", MIRRORED, None, None),
    ))


@dataclass(frozen=True)
class SplitShape:
    """The hyperparameters the split reads (llama_hparams), per layer where they vary."""

    architecture: str
    n_layer: int                  # trunk layers (hparams.n_layer(): rotation of the output tensors)
    n_head: int
    head_kv: tuple[int, ...]
    key_length: int
    value_length: int
    recurrent: tuple[bool, ...]
    sliding: tuple[bool, ...]
    ssm_state: int                # head size of a delta-net head (= state size)
    ssm_groups: int               # its key heads
    ssm_value_heads: int          # its value heads (time_step_rank)
    ssm_conv: int
    n_ff: tuple[int, ...]
    n_ff_expert: int

    def n_gqa(self, layer: int) -> int:
        return self.n_head // max(self.head_kv[layer], 1) if self.head_kv[layer] else 0

    def same_kind_before(self, layer: int) -> int:
        """Layers before `layer` of its kind (recurrent, sliding): what the rounding's rotation counts."""
        kind = (self.recurrent[layer], self.sliding[layer])
        return sum((self.recurrent[i], self.sliding[i]) == kind for i in range(layer))


def split_shape(info: GgufInfo, shape: ModelShape) -> SplitShape:
    meta, arch = info.metadata, info.architecture

    def number(suffix: str) -> int:
        value = meta.get(f"{arch}.{suffix}")
        return int(value) if isinstance(value, (int, float)) else 0

    n_ff = meta.get(f"{arch}.feed_forward_length")
    per_layer = ([int(v) for v in n_ff[:shape.n_layer_all]] if isinstance(n_ff, list) and len(n_ff) >= shape.n_layer_all
                 else [int(n_ff) if isinstance(n_ff, (int, float)) else 0] * shape.n_layer_all)
    return SplitShape(arch, shape.n_layer, shape.n_head, shape.head_kv, shape.key_length, shape.value_length,
                      tuple(kind.recurrent for kind in shape.layers), tuple(kind.sliding for kind in shape.layers),
                      number("ssm.state_size"), number("ssm.group_count"), number("ssm.time_step_rank"),
                      number("ssm.conv_kernel"), tuple(per_layer), shape.n_ff_expert)


def block_size(ggml_type: int) -> int:
    return GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)][0]


def _qwen_segments(name: str, axis_length: int, layer: int, s: SplitShape) -> list[tuple[int, int]] | None:
    """Segments of the delta-net tensors and fused Q/gate attention of qwen3next/qwen35/qwen35moe."""
    if not s.recurrent[layer] and name in ("attn_qkv.weight", "attn_qkv.bias"):
        return [(s.n_head * s.key_length * 2, 1), (s.head_kv[layer] * s.value_length, 2)]
    key_dim, value_dim = s.ssm_state * s.ssm_groups, s.ssm_state * s.ssm_value_heads
    ratio = s.ssm_value_heads // max(s.ssm_groups, 1)
    conv = s.ssm_conv - 1
    if s.architecture == "qwen3next":       # [k0_v0, k0_v1, k1_v2, k1_v3]: keys then values
        table = {"attn_qkv.weight": [(key_dim, 2), (value_dim, 1)], "ssm_conv1d.weight": [(key_dim, 2), (value_dim, 1)],
                 "cache_r": [(key_dim * conv, 2), (value_dim * conv, 1)]}
    else:                                   # [k0_v0, k1_v1, k0_v2, k1_v3]: values on the scale of keys
        table = {"attn_qkv.weight": [(key_dim, 2 + ratio)], "ssm_conv1d.weight": [(key_dim, 2 + ratio)],
                 "attn_gate.weight": [(key_dim, ratio)], "ssm_out.weight": [(key_dim, ratio)],
                 "ssm_dt.bias": [(s.ssm_groups, ratio)], "ssm_a": [(s.ssm_groups, ratio)],
                 "ssm_alpha.weight": [(s.ssm_groups, ratio)], "ssm_beta.weight": [(s.ssm_groups, ratio)],
                 "cache_r": [(key_dim * conv, 2 + ratio)], "cache_s": [(s.ssm_groups * s.ssm_state ** 2, ratio)]}
    return table.get(name)


def _segments(name: str, axis_length: int, layer: int, s: SplitShape) -> list[tuple[int, int]]:
    """(elements, repeats) of the parts of the split axis that are cut alike (get_split_segments)."""
    if s.architecture in _QWEN_GATED:
        found = _qwen_segments(name, axis_length, layer, s)
        if found is not None:
            return found
    elif name in ("attn_qkv.weight", "attn_qkv.bias"):
        q, k, v = s.n_head * s.key_length, s.head_kv[layer] * s.key_length, s.head_kv[layer] * s.value_length
        return [(q, 1), (k, 2)] if k == v else [(q, 1), (k, 1), (v, 1)]
    elif re.fullmatch(r"ffn_up(_exps)?.(weight|bias)", name) and axis_length == 2 * s.n_ff[layer]:
        return [(s.n_ff[layer], 2)]
    if re.fullmatch(r"ffn_gate_up(_exps)?.weight", name):
        return [(s.n_ff_expert, 2)]
    return [(axis_length, 1)]


_FFN = re.compile(r"ffn_(up|gate|gate_up|down)(_exps)?\.(weight|bias)|ffn_(up|gate|down)_shexp\.weight")


def _recurrent_granularity(name: str, blck: int, s: SplitShape) -> int | None:
    head = s.ssm_state
    g_qkv = math.lcm(math.lcm(blck, 128), head)
    table = {"attn_qkv.weight": g_qkv, "attn_gate.weight": g_qkv, "ssm_conv1d.weight": g_qkv, "ssm_out.weight": g_qkv,
             "ssm_dt.bias": g_qkv // head, "ssm_a": g_qkv // head, "ssm_alpha.weight": g_qkv // head,
             "ssm_beta.weight": g_qkv // head, "ssm_ba.weight": 2 * (g_qkv // head),
             "cache_r": g_qkv * (s.ssm_conv - 1), "cache_s": g_qkv * head}
    return table.get(name)


def _attention_granularity(name: str, blck: int, layer: int, segments: int, n_devices: int, s: SplitShape,
                           axis_length: int) -> list[int] | None:
    n_gqa = s.n_gqa(layer)
    n_embd_q = n_gqa * s.key_length
    perf = blck           # raised while it leaves every device a share (head sizes like 80)
    while perf < 128 and perf * n_devices < n_embd_q:
        perf *= 2
    g_q = math.lcm(n_embd_q, perf) if n_embd_q else perf
    g_head = g_q // s.key_length
    g_kv = g_q // max(n_gqa, 1)
    g_v = (g_kv // s.key_length) * s.value_length
    q_gated = math.lcm(2 * n_embd_q, perf) if s.architecture in _QWEN_GATED else g_q
    if name in ("attn_qkv.weight", "attn_qkv.bias"):
        if s.architecture in _QWEN_GATED:
            return [q_gated, g_kv]
        return [g_q, g_kv, g_v] if segments == 3 else [g_q, g_kv]
    table = {"attn_sinks.weight": g_head, "attn_q.weight": q_gated, "attn_q.bias": q_gated,
             "attn_output.weight": g_head * s.value_length,
             "attn_gate.weight": g_head if axis_length == s.n_head else g_q,
             "attn_k.weight": g_kv, "attn_k.bias": g_kv, "cache_k": g_kv,
             "attn_v.weight": g_v, "attn_v.bias": g_v, "cache_v": g_v}
    return [table[name]] if name in table else None


def _granularity(name: str, blck: int, layer: int, segments: int, n_devices: int, s: SplitShape,
                 axis_length: int = 0) -> list[int]:
    """The multiple each cut is rounded down to (get_split_granularity)."""
    if s.recurrent[layer]:
        step = _recurrent_granularity(name, blck, s)
        if step is not None:
            return [step] * segments
    else:
        found = _attention_granularity(name, blck, layer, segments, n_devices, s, axis_length)
        if found is not None:
            return found
    if _FFN.fullmatch(name):
        return [math.lcm(blck, 128)] * segments
    return [1] * segments


def cut(segments: Sequence[tuple[int, int]], granularity: Sequence[int], shares: Sequence[float],
        rotation: int) -> tuple[int, ...]:
    """Elements of the split axis each device holds: every segment cut at the cumulative shares,
    each cut rounded down to its granularity, the device order rotated by `rotation`."""
    n = len(shares)
    weights = [np.float32(shares[(j + rotation) % n]) for j in range(n)]
    scan = list(np.cumsum(np.array(weights, dtype=np.float32), dtype=np.float32))
    held = [0] * n
    for (length, repeats), step in zip(segments, granularity, strict=True):
        low = 0
        for j in range(n - 1):
            if scan[-1] == 0:
                high = length * (j + 1) // n
            else:
                high = int(np.float32(np.float32(length) * scan[j]) / scan[-1])
            high -= high % step
            held[(j + rotation) % n] += (high - low) * repeats
            low = high
        held[(n - 1 + rotation) % n] += (length - low) * repeats
    return tuple(held)


def _rule(name: str) -> tuple[int, str | None, str | None] | None:
    for pattern, axis, reference, fallback in _RULES:
        if pattern.fullmatch(name):
            return axis, reference, fallback
    return None


@dataclass(frozen=True)
class WeightShares:
    """Bytes of a model's weights on each device of the Meta device, by where they belong."""

    layers: tuple[int, ...]       # repeating layers, experts included
    experts: tuple[int, ...]      # of which expert tensors
    head: tuple[int, ...]         # the output head (and output norm)


def weight_shares(info: GgufInfo, shape: SplitShape, shares: tuple[float, ...],
                  on_gpu: Callable[[int, str], bool], head_on_gpu: bool = True) -> WeightShares:
    """Each device's bytes of the tensors llama.cpp puts on the Meta device.

    `on_gpu(layer, name)` says whether a block tensor is loaded there (not for MTP layers without
    draft-mtp, layers past -ngl, experts of --n-cpu-moe layers); the input embedding stays in host
    memory (llama.cpp keeps the input layer on the CPU); a model without `output.weight` has a
    device copy of the embedding as its head (mirrored)."""
    n = len(shares)
    by_name = {tensor.name: tensor for tensor in info.tensors}
    layers, experts, head = [0] * n, [0] * n, [0] * n
    for tensor in info.tensors:
        found = _BLOCK.match(tensor.name)
        if found:
            layer, name = int(found.group(1)), found.group(2)
            if not on_gpu(layer, name):
                continue
            held = _tensor_share(tensor, name, layer, f"blk.{layer}.", by_name, shape, shares)
            layers = [total + part for total, part in zip(layers, held, strict=True)]
            if EXPERT_TENSOR.search(tensor.name):
                experts = [total + part for total, part in zip(experts, held, strict=True)]
        elif head_on_gpu and (not tensor.name.startswith("token_embd.")
                              or (tensor.name == "token_embd.weight" and "output.weight" not in by_name)):
            held = _tensor_share(tensor, tensor.name, 0, "", by_name, shape, shares)
            head = [total + part for total, part in zip(head, held, strict=True)]
    return WeightShares(tuple(layers), tuple(experts), tuple(head))


def _tensor_share(tensor: Tensor, name: str, layer: int, prefix: str, by_name: dict[str, Tensor],
                  s: SplitShape, shares: tuple[float, ...]) -> tuple[int, ...]:
    n = len(shares)
    if prefix:
        rule = _rule(name)
        rotation = s.same_kind_before(layer) % n
    elif tensor.name == "output.weight":
        rule, rotation = (1, None, None), s.n_layer % n
    elif tensor.name == "output.bias":
        rule, rotation = (0, "output.weight", None), s.n_layer % n
    else:
        rule, rotation = None, 0          # output norm, a tied head (token_embd.weight): mirrored
    if rule is None or rule[0] == MIRRORED or (name.startswith("attn_") and "_norm" in name
                                               and (len(tensor.dims) < 2 or tensor.dims[1] == 1)):
        return (tensor.nbytes,) * n
    axis, reference, fallback = rule
    if axis >= len(tensor.dims):
        return (tensor.nbytes,) * n
    ref = by_name.get(prefix + reference) if reference else tensor
    if ref is None and fallback:
        ref = by_name.get(prefix + fallback)
    blck = block_size((ref or tensor).ggml_type)
    segments = _segments(name, tensor.dims[axis], layer, s)
    granularity = _granularity(name, blck, layer, len(segments), n, s, tensor.dims[axis])
    held = cut(segments, granularity, shares, rotation)
    return tuple(tensor.nbytes * part // tensor.dims[axis] for part in held)


def cache_shares(cache: str, layer: int, width: int, reference_type: int, shape: SplitShape,
                 shares: tuple[float, ...]) -> tuple[int, ...]:
    """Elements of one cache row (`cache_k`, `cache_v`, `cache_r`, `cache_s` of `layer`, `width` wide)
    on each device: the cache is cut like the layer's attention heads (or delta-net heads).
    `reference_type` is the ggml type of the layer's attn_output (or ssm_out) weight."""
    n = len(shares)
    segments = _segments(cache, width, layer, shape) if cache in ("cache_r", "cache_s") else [(width, 1)]
    granularity = _granularity(cache, block_size(reference_type), layer, len(segments), n, shape)
    return cut(segments, granularity, shares, shape.same_kind_before(layer) % n)

