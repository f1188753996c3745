"""A tensor split's weights, KV cache and recurrent state on each GPU (the arithmetic: specd.gpu.tensor_split)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from specd.gpu.arch import ModelShape
from specd.gpu.compute import Context, row_bytes
from specd.gpu.gguf import GgufInfo
from specd.gpu.layout import EXPERT_TENSOR
from specd.gpu.placement import LayerPlacement
from specd.gpu.settings import ServerSettings
from specd.gpu.tensor_split import SplitShape, cache_shares, split_shape, weight_shares

if TYPE_CHECKING:
    from specd.gpu.vram import _Tally


def split_values(settings: ServerSettings, n_devices: int) -> tuple[float, ...]:
    """The `--tensor-split` values llama.cpp cuts by, one per Meta device (all 0: an even cut)."""
    return tuple(settings.tensor_split[j] if j < len(settings.tensor_split) else 0.0 for j in range(n_devices))


def _on_gpu(shape: ModelShape, placement: LayerPlacement, settings: ServerSettings, draft: bool
            ) -> Callable[[int, str], bool]:
    """Is tensor `name` of block `layer` loaded onto the Meta device?"""
    def on_gpu(layer: int, name: str) -> bool:
        if layer >= len(shape.layers) or placement.layer_device[layer] is None:
            return False
        if shape.layers[layer].mtp and (draft or not settings.mtp):
            return False                                       # TENSOR_SKIP unless draft-mtp
        return not (EXPERT_TENSOR.search(f".{name}") and settings.expert_on_cpu(layer, draft=draft))
    return on_gpu


def _state_rows(info: GgufInfo, index: int, split: SplitShape, values: tuple[float, ...]) -> tuple[int, ...]:
    """f32 values of one sequence's conv + delta-net state of recurrent layer `index` on each device."""
    meta, arch = info.metadata, info.architecture

    def number(key: str) -> int:
        value = meta.get(f"{arch}.{key}")
        return int(value) if isinstance(value, (int, float)) else 0

    reference = next((t.ggml_type for t in info.tensors if t.name == f"blk.{index}.ssm_out.weight"), 0)
    conv, inner = number("ssm.conv_kernel"), number("ssm.inner_size")
    state, groups = number("ssm.state_size"), number("ssm.group_count")
    conv_rows = cache_shares("cache_r", index, max(conv - 1, 0) * (inner + 2 * groups * state), reference, split,
                             values)
    state_rows = cache_shares("cache_s", index, state * inner, reference, split, values)
    return tuple(a + b for a, b in zip(conv_rows, state_rows, strict=True))


def place_tensor_split(tally: _Tally, info: GgufInfo, shape: ModelShape, placement: LayerPlacement,
                       settings: ServerSettings, ctx: Context, *, draft: bool, mtp_cache: bool = False) -> None:
    """Weights, KV cache and recurrent state of one model on each GPU of a tensor split
    (`mtp_cache`: only the MTP context's cache of the NextN layers)."""
    split, values = split_shape(info, shape), split_values(settings, len(placement.devices))
    on_gpu = _on_gpu(shape, placement, settings, draft)
    if not mtp_cache:
        shares = weight_shares(info, split, values, on_gpu, placement.output_device is not None)
        for j, device in enumerate(placement.devices):
            tally.add(device, "draft_weights" if draft else "weights", shares.layers[j] + shares.head[j])
            if not draft:
                tally.add(device, "expert_bytes", shares.experts[j])
    _place_caches(tally, info, shape, placement, settings, ctx, split, values, on_gpu, draft=draft,
                  mtp_cache=mtp_cache)


def _place_caches(tally: _Tally, info: GgufInfo, shape: ModelShape, placement: LayerPlacement,
                  settings: ServerSettings, ctx: Context, split: SplitShape, values: tuple[float, ...],
                  on_gpu: Callable[[int, str], bool], *, draft: bool, mtp_cache: bool) -> None:
    cache_k = settings.draft_cache_type_k if draft or mtp_cache else settings.cache_type_k
    cache_v = settings.draft_cache_type_v if draft or mtp_cache else settings.cache_type_v
    kv_part = "draft_kv" if draft or mtp_cache else "kv"
    rows = max(ctx.n_seq, 1) * (1 + (0 if draft or not shape.rs_rollback else settings.n_rs_seq))
    references = {t.name: t.ggml_type for t in info.tensors}
    for index, kind in enumerate(shape.layers):
        if placement.layer_device[index] is None or kind.mtp != mtp_cache or (kind.mtp and not settings.mtp):
            continue
        if not draft and not mtp_cache:
            experts = layer_has_gpu_experts(info, index, on_gpu)
            for device in placement.devices:
                tally.add(device, "gpu_layers", 1)
                tally.add(device, "expert_layers", 1 if experts else 0)
        if kind.recurrent:
            state = _state_rows(info, index, split, values)
            for j, device in enumerate(placement.devices):
                tally.add(device, "draft_kv" if draft else "recurrent", 4 * state[j] * rows)
        elif kind.attention:
            reference = references.get(f"blk.{index}.attn_output.weight", 0)
            cells = ctx.swa_cells(shape.sliding_window) if kind.sliding else ctx.cells
            k_rows = cache_shares("cache_k", index, shape.k_width(index), reference, split, values)
            v_rows = cache_shares("cache_v", index, shape.v_width(index), reference, split, values)
            for j, device in enumerate(placement.devices):
                row = row_bytes(cache_k, k_rows[j]) + row_bytes(cache_v, v_rows[j])
                tally.add(device, kv_part, row * cells * ctx.n_stream)


def layer_has_gpu_experts(info: GgufInfo, index: int, on_gpu: Callable[[int, str], bool]) -> bool:
    prefix = f"blk.{index}."
    return any(EXPERT_TENSOR.search(t.name) and on_gpu(index, t.name[len(prefix):])
               for t in info.tensors if t.name.startswith(prefix))
