"""specd.gpu.expert_copies: one or two host-expert copies in the CUDA compute buffer.

The shapes are the measured models' (benchmarks/gpu_vram/make_models.py): moe35 (qwen35moe: 3
recurrent layers then one full-attention layer, 256 experts, top-8), next80 (qwen3next, 512
experts, top-10), moe30 (qwen3moe, attention only, 128 experts). The expected MiB are llama.cpp's
own `CUDA0 compute buffer size` lines of runs 3-6 and of the run-7 dry-run sweep
(benchmarks/gpu_vram/sweep-run7.jsonl) minus the f16 KQ mask (n_kv x ubatch x 2 B).
"""

from __future__ import annotations

import pytest

from specd.gpu.arch import LayerKind, ModelShape
from specd.gpu.expert_copies import expert_copies, first_attention_layer, holds_two_copies, mask_displaced

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


def _mask(cells: int, ubatch: int) -> int:
    return cells * ubatch * 2


def test_host_layers_around_the_first_attention_layer_and_a_large_mask_hold_two_copies() -> None:
    # moe35 --cpu-moe at ubatch 512, 32k: 617.54 MiB measured, 32 MiB of it the mask
    copies = expert_copies(MOE35, 512, range(12), COPY35, _mask(32768, 512))
    assert copies.copies == 2
    assert copies.peak_bytes / MIB == pytest.approx(617.54 - 32, abs=1.0)
    assert copies.margin_bytes == 0
    # --n-cpu-moe 9 at ubatch 1024, 24k context: 675.07 MiB measured, 48 MiB mask
    assert expert_copies(MOE35, 1024, range(9), COPY35, _mask(24576, 1024)).peak_bytes / MIB == pytest.approx(
        675.07 - 48, abs=1.0)


def test_a_mask_that_fits_the_freed_gate_and_up_outputs_leaves_one_copy() -> None:
    # moe35 --n-cpu-moe 10: 16k cells (32 KiB a token, the hole's size) one copy, 20k two
    assert not mask_displaced(MOE35, 512, _mask(16384, 512))
    assert mask_displaced(MOE35, 384, _mask(20480, 384))
    assert expert_copies(MOE35, 512, range(10), COPY35, _mask(16384, 512)).copies == 1
    # -np 3 at 28k: each stream's mask is a third (run 6's +6.0% case, 359.2 MiB measured)
    copies = expert_copies(MOE35, 512, range(10), COPY35, _mask(28672 // 3, 512))
    assert copies.copies == 1
    assert copies.margin_bytes == COPY35
    assert (copies.peak_bytes + _mask(28672 // 3, 512)) / MIB == pytest.approx(359.2, abs=6.0)
    # and at ubatch 1536 an 80k q4_0 context displaces it: two copies (run 6's -2.9% case, 908.6 MiB)
    assert expert_copies(MOE35, 1536, range(8), COPY35, _mask(81920, 1536)).peak_bytes / MIB == pytest.approx(
        908.6 - 240, abs=1.0)


def test_host_layers_only_before_or_at_the_first_attention_layer_hold_one_copy() -> None:
    assert first_attention_layer(MOE35) == 3
    # moe35 --n-cpu-moe 3 (layers 0-2), q8_0 cache at 64k: 409.54 MiB measured, 64 MiB mask
    copies = expert_copies(MOE35, 512, range(3), COPY35, _mask(65536, 512))
    assert copies.copies == 1
    assert copies.peak_bytes / MIB == pytest.approx(409.54 - 64, abs=1.0)
    assert not holds_two_copies(MOE35, 512, [0, 1, 2, 3], _mask(32768, 512))
    # next80 --cpu-moe: its attention layer is the last one; 667.04 MiB measured, 32 MiB mask
    assert not holds_two_copies(NEXT80, 512, range(4), _mask(32768, 512))
    assert expert_copies(NEXT80, 512, range(4), COPY80, _mask(32768, 512)).peak_bytes / MIB == pytest.approx(
        667.04 - 32, abs=3.0)


def test_a_model_attending_in_its_first_layer_holds_one_copy() -> None:
    # moe30 --cpu-moe: the mask is copied in before any expert; 296.01 MiB measured, 32 MiB mask
    # (the rule counts 17 MiB more activations)
    assert first_attention_layer(MOE30) == 0
    copies = expert_copies(MOE30, 512, range(8), COPY30, _mask(32768, 512))
    assert copies.copies == 1
    assert copies.peak_bytes / MIB == pytest.approx(296.01 - 32, abs=20.0)


def test_no_mask_no_second_copy() -> None:
    assert not holds_two_copies(MOE35, 512, range(12), 0)


def test_the_copies_and_activations_grow_with_the_ubatch() -> None:
    small = expert_copies(MOE35, 256, range(12), COPY35, _mask(32768, 256)).peak_bytes
    large = expert_copies(MOE35, 512, range(12), COPY35, _mask(32768, 512)).peak_bytes
    # moe35 --cpu-moe at ubatch 256: 580.77 MiB measured, 16 MiB mask
    assert small / MIB == pytest.approx(580.77 - 16, abs=1.0)
    assert large - small == 256 * 4 * (8 * 2048 + 8 * 512 + 3 * 256)
