"""How much of the CUDA compute buffer the copies of host-memory expert tensors take.

With `--cpu-moe`/`--n-cpu-moe` a layer's `ffn_{gate,up,down}_exps` stay in host memory; for a prompt
batch ggml's scheduler offloads their MUL_MAT_ID ops to the GPU and copies each weight in, one split
per weight (ggml-backend.cpp, pass 5: "by starting a new split, the memory of the previously offloaded
weights can be reused"). A split's inputs are allocated at the split's start and each copy is freed
once its MUL_MAT_ID is done, so at most one copy is live at a time; the compute buffer, though, is the
highest offset ggml-alloc's best-fit allocator ever reaches, and that is one copy or two.

What makes it two (read off llama.cpp's own buffer sizes, see benchmarks/gpu_vram/RESULTS.md):
the KQ mask is a graph input, so it lives in host memory and the scheduler copies it to the GPU as an
input of the split that holds the first attention layer (one copy, kept until the last attention
layer). In a hybrid model whose first layers are recurrent (qwen35moe: layers 0-2), and whose expert
layers before it are in host memory, that split starts at the host `ffn_down_exps` multiplication of
the layer before: its copy is allocated first, then the mask. Best fit puts the mask into the hole the
layer's freed gate and up outputs left (2 x n_used x n_ff_exp f32 per ubatch token) when it fits
there; when it does not, it lands next to the copy's region and stays there for the rest of the
graph, and the next host copy (a layer after the attention layer) no longer fits the freed region:
the buffer reaches two copies. So two copies when

- a host-expert layer comes before the first attention layer (the mask is copied in between host
  copies) and another one after it (a later copy needs the region again), and
- the mask (n_kv per stream x ubatch x 2 B, f16) is larger than that hole: per ubatch token,
  n_kv x 2 B > 2 x n_used x n_ff_exp x 4 B (moe35: 16k cells fit, 20k do not; with `-np 3` each
  stream's mask is a third).

Else one copy: models that attend in their first layer (qwen3moe: the mask is copied before any
expert), or whose host layers all precede or end at the first attention layer (next80 at 4 layers,
`--n-cpu-moe` up to 4 for moe35). The rule was read off the offload cases of runs 3-6 and a dry-run
sweep of 336 settings (benchmarks/gpu_vram/sweep-run7.jsonl: the CUDA compute buffer of the memory-fit
pass, which places tensors as the real load does); the allocator's placement is not simulated tensor
by tensor, so the fit check keeps a second copy free wherever one copy is counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from specd.gpu.arch import ModelShape


@dataclass(frozen=True)
class ExpertCopies:
    """The peak of the MoE block of host-expert layers on one GPU (KQ masks not included)."""

    copies: Literal[1, 2]
    peak_bytes: int       # the copies and the activations live beside them
    margin_bytes: int     # what the allocator may reach beyond the estimate (a second copy)


def _router_floats(shape: ModelShape) -> int:
    return 3 * shape.experts                                  # logits, probabilities, their order


def first_attention_layer(shape: ModelShape) -> int | None:
    """The first layer (MTP layers aside) that reads the KQ mask."""
    return next((index for index, kind in enumerate(shape.layers) if kind.attention and not kind.mtp), None)


def mask_displaced(shape: ModelShape, ubatch: int, mask_bytes: int) -> bool:
    """Is the f16 KQ mask too big for the hole of a host layer's freed gate and up outputs?"""
    return mask_bytes > ubatch * 4 * 2 * shape.experts_used * shape.n_ff_expert


def holds_two_copies(shape: ModelShape, ubatch: int, host_layers: Sequence[int], mask_bytes: int) -> bool:
    """Host-expert layers on both sides of the first attention layer, and a mask too big for the hole."""
    first = first_attention_layer(shape)
    if first is None or not mask_bytes:
        return False
    before = any(index < first for index in host_layers)
    after = any(index > first and not shape.layers[index].mtp for index in host_layers)
    return before and after and mask_displaced(shape, ubatch, mask_bytes)


def expert_copies(shape: ModelShape, ubatch: int, host_layers: Sequence[int], copy_bytes: int,
                  mask_bytes: int) -> ExpertCopies:
    """The MoE-block peak of `host_layers` (their experts in host memory) on one GPU.

    `copy_bytes` is the largest expert tensor of those layers; `mask_bytes` the graph's KQ masks on
    that GPU (n_kv per stream x ubatch x 2 B for each attention cache; 0 without one)."""
    routed = shape.experts_used * shape.n_embd               # experts' outputs (f32 per token)
    product = shape.experts_used * shape.n_ff_expert         # their SwiGLU product
    if holds_two_copies(shape, ubatch, host_layers, mask_bytes):
        return ExpertCopies(2, 2 * copy_bytes + ubatch * 4 * (routed + product + _router_floats(shape)), 0)
    return ExpertCopies(1, copy_bytes + ubatch * 4 * (2 * routed + product + _router_floats(shape)), copy_bytes)
