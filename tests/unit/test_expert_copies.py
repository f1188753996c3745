"""specd.gpu.expert_copies: one or two host-expert copies in the CUDA compute buffer.

The shapes are the measured models' (benchmarks/gpu_vram/make_models.py): moe35 (qwen35moe: 3
recurrent layers then one full-attention layer, 256 experts, top-8), next80 (qwen3next, 512
experts, top-10), moe30 (qwen3moe, attention only, 128 experts). The expected MiB are llama.cpp's
own `CUDA0 compute buffer size` lines of runs 3-5 minus the f16 KQ mask (n_ctx x ubatch x 2 B).
"""

from __future__ import annotations

import pytest

from specd.gpu.arch import LayerKind, ModelShape
from specd.gpu.expert_copies import expert_copies, holds_two_copies

MIB = 1024**2
RECURRENT = LayerKind(attention=False, sliding=False, recurrent=True, mtp=False)
ATTENTION = LayerKind(attention=True, sliding=False, recurrent=False, mtp=False)


def _shape(layers: tuple[LayerKind, ...], experts: int, used: int, n_ff_expert: int) -> ModelShape:
    return ModelShape("test", len(layers), len(layers), layers, 2048, 16, (2,) * len(layers), 256, 256, 0,
                      0, 8192, 4096, 0, experts, used, n_ff_expert, 512, 248320, 262144)


HYBRID12 = (RECURRENT, RECURRENT, RECURRENT, ATTENTION) * 3
MOE35 = _shape(HYBRID12, 256, 8, 512)
NEXT80 = _shape((RECURRENT, RECURRENT, RECURRENT, ATTENTION), 512, 10, 512)
MOE30 = _shape((ATTENTION,) * 8, 128, 8, 768)
COPY35, COPY80, COPY30 = 272 * MIB, 544 * MIB, 204 * MIB
SMALL_PEAK = 100 * MIB


def test_attention_layer_followed_by_another_host_layer_in_a_hybrid_holds_two_copies() -> None:
    # moe35 --cpu-moe at ubatch 512: 617.54 MiB measured, 32 MiB of it the mask
    copies = expert_copies(MOE35, 512, range(12), COPY35, SMALL_PEAK)
    assert copies.copies == 2
    assert copies.peak_bytes / MIB == pytest.approx(617.54 - 32, abs=1.0)
    assert copies.margin_bytes == 0
    # --n-cpu-moe 9 at ubatch 1024, 24k context: 675.07 MiB measured, 48 MiB mask
    assert expert_copies(MOE35, 1024, range(9), COPY35, SMALL_PEAK).peak_bytes / MIB == pytest.approx(
        675.07 - 48, abs=1.0)


def test_only_recurrent_layers_in_host_memory_hold_one_copy() -> None:
    # moe35 --n-cpu-moe 3 (layers 0-2), q8_0 cache at 64k: 409.54 MiB measured, 64 MiB mask
    copies = expert_copies(MOE35, 512, range(3), COPY35, SMALL_PEAK)
    assert copies.copies == 1
    assert copies.peak_bytes / MIB == pytest.approx(409.54 - 64, abs=1.0)
    assert copies.margin_bytes == COPY35   # the fit check keeps room for a second


def test_the_attention_layer_as_the_last_host_layer_holds_one_copy() -> None:
    # next80 --cpu-moe: its attention layer is the last one; 667.04 MiB measured, 32 MiB mask
    assert not holds_two_copies(NEXT80, range(4), COPY80, SMALL_PEAK)
    assert expert_copies(NEXT80, 512, range(4), COPY80, SMALL_PEAK).peak_bytes / MIB == pytest.approx(
        667.04 - 32, abs=3.0)
    assert not holds_two_copies(MOE35, [0, 1, 2, 3], COPY35, SMALL_PEAK)


def test_a_model_without_recurrent_layers_holds_one_copy() -> None:
    # moe30 --cpu-moe: 296.01 MiB measured, 32 MiB mask (the rule counts 17 MiB more activations)
    copies = expert_copies(MOE30, 512, range(8), COPY30, SMALL_PEAK)
    assert copies.copies == 1
    assert copies.peak_bytes / MIB == pytest.approx(296.01 - 32, abs=20.0)


def test_temporaries_as_big_as_a_copy_leave_a_hole_for_the_next_one() -> None:
    assert holds_two_copies(MOE35, range(12), COPY35, COPY35 - 1)
    assert not holds_two_copies(MOE35, range(12), COPY35, COPY35)


def test_the_copies_and_activations_grow_with_the_ubatch() -> None:
    small = expert_copies(MOE35, 256, range(12), COPY35, SMALL_PEAK).peak_bytes
    large = expert_copies(MOE35, 512, range(12), COPY35, SMALL_PEAK).peak_bytes
    # moe35 --cpu-moe at ubatch 256: 580.77 MiB measured, 16 MiB mask
    assert small / MIB == pytest.approx(580.77 - 16, abs=1.0)
    assert large - small == 256 * 4 * (8 * 2048 + 8 * 512 + 3 * 256)
