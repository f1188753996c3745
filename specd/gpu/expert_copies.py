"""How much of the CUDA compute buffer the copies of host-memory expert tensors take.

With `--cpu-moe`/`--n-cpu-moe` a layer's `ffn_{gate,up,down}_exps` stay in host memory; for a prompt
batch ggml's scheduler offloads their MUL_MAT_ID ops to the GPU and copies each weight in, one split
per weight (ggml-backend.cpp: "by starting a new split, the memory of the previously offloaded weights
can be reused"). Each copy is freed once its MUL_MAT_ID is done, so at most one copy is live at a
time; the compute buffer is the highest offset ggml-alloc's best-fit allocator ever reaches, though,
and that is one copy or two (benchmarks/gpu_vram/RESULTS.md, llama.cpp's `CUDA0 compute buffer size`):

- one copy: the copy, plus per ubatch token the routed experts' outputs before and after weighting,
  their SwiGLU product and the router's logits/probabilities/order — next80 (qwen3next), moe30
  (qwen3moe) and moe35 (qwen35moe) with only recurrent layers' experts in host memory, to the MiB;
- two copies: in a hybrid (recurrent + attention) model, when a full-attention layer's experts and a
  later layer's experts are both in host memory, the attention layer's tensors are left inside the
  freed copy's region and the next copy is placed behind them; the buffer then reaches two copies,
  plus per token the experts' outputs and their SwiGLU product (moe35 with `--cpu-moe`, `--n-cpu-moe`
  6 and 9, ubatch 256 to 1024, to the MiB). A ubatch whose other temporaries already span a copy
  leaves a hole the next copy fits in (moe35 at ubatch 2048: one copy).

The rule was read off runs 3-5 (the allocator's placement is not modelled tensor by tensor), so the
fit check keeps a second copy free wherever one copy is counted.
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


def holds_two_copies(shape: ModelShape, host_layers: Sequence[int], copy_bytes: int, other_peak: int) -> bool:
    """A full-attention layer of a hybrid model with a later host-expert layer, and no hole as big as a copy."""
    if not any(kind.recurrent for kind in shape.layers) or other_peak >= copy_bytes:
        return False
    ordered = sorted(host_layers)
    return any(shape.layers[index].attention and not shape.layers[index].recurrent and not shape.layers[index].mtp
               for index in ordered[:-1])


def expert_copies(shape: ModelShape, ubatch: int, host_layers: Sequence[int], copy_bytes: int,
                  other_peak: int) -> ExpertCopies:
    """The MoE-block peak of `host_layers` (their experts in host memory) on one GPU.

    `copy_bytes` is the largest expert tensor of those layers; `other_peak` the rest of the graph's
    largest working set (activations or attention, masks excluded) on that GPU."""
    routed = shape.experts_used * shape.n_embd               # experts' outputs (f32 per token)
    product = shape.experts_used * shape.n_ff_expert         # their SwiGLU product
    if holds_two_copies(shape, host_layers, copy_bytes, other_peak):
        return ExpertCopies(2, 2 * copy_bytes + ubatch * 4 * (routed + product + _router_floats(shape)), 0)
    return ExpertCopies(1, copy_bytes + ubatch * 4 * (2 * routed + product + _router_floats(shape)), copy_bytes)
