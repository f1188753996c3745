"""specd.gpu.vram: the estimator's arithmetic, anchored on llama.cpp's own buffer sizes measured on an H100.

Models here are header-only GGUFs (tensor table, no data) with real architecture shapes, written by
`write_header`; the MiB figures are the `CUDA0 ... buffer size` lines llama-server 0.3.36 printed for
the same shapes (benchmarks/gpu_vram/RESULTS.md).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType
from gguf.constants import GGML_QUANT_SIZES
from hypothesis import given
from hypothesis import strategies as st

from specd.errors import PreflightError
from specd.gpu.compute import CUBLAS, CUDA_CONTEXT, EXTRA_CONTEXT
from specd.gpu.fit import fit_check
from specd.gpu.gguf import GgufInfo
from specd.gpu.nvml import GIB, GpuDevice, GpuState, NoGpu
from specd.gpu.vram import (
    CACHE_TYPE_BLOCKS,
    MIB,
    VramEstimate,
    estimate_vram,
    read_weight_layout,
    row_bytes,
)
from tests.gguf_factory import F16, Q8_0, write_header


@pytest.fixture(scope="module")
def llama8b_q8(tmp_path_factory: pytest.TempPathFactory) -> GgufInfo:
    return write_header(tmp_path_factory.mktemp("m") / "llama8b.gguf", "llama", 32, 4096, 32, 8, 14336, 128,
                        128256, False, Q8_0)


@pytest.fixture(scope="module")
def llama1b_f16(tmp_path_factory: pytest.TempPathFactory) -> GgufInfo:
    return write_header(tmp_path_factory.mktemp("m") / "llama1b.gguf", "llama", 16, 2048, 32, 8, 8192, 64,
                        128256, True, F16)


@pytest.fixture(scope="module")
def gemma3_4b(tmp_path_factory: pytest.TempPathFactory) -> GgufInfo:
    return write_header(tmp_path_factory.mktemp("m") / "gemma3.gguf", "gemma3", 34, 2560, 8, 4, 10240, 256,
                        262144, True, Q8_0, sliding_window=1024)


def mib(value: int) -> float:
    return round(value / MIB, 1)


@pytest.mark.parametrize("cache_type", sorted(CACHE_TYPE_BLOCKS))
def test_row_bytes_match_ggml_block_sizes(cache_type: str) -> None:
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[cache_type.upper()]]
    assert row_bytes(cache_type, 1024) == 1024 // block * size


def test_unknown_cache_type_is_a_preflight_error() -> None:
    with pytest.raises(PreflightError, match="unknown KV cache type 'q3_k'"):
        row_bytes("q3_k", 128)


def test_layout_keeps_the_embedding_off_the_gpu_and_copies_it_for_tied_output(
        llama8b_q8: GgufInfo, llama1b_f16: GgufInfo) -> None:
    untied, tied = read_weight_layout(llama8b_q8.path), read_weight_layout(llama1b_f16.path)
    assert untied.has_output_weight and not tied.has_output_weight
    assert untied.n_vocab == tied.n_vocab == 128256
    assert len(untied.layer_bytes) == 32 and len(tied.layer_bytes) == 16
    assert tied.float_matrices and not untied.float_matrices
    assert untied.input_bytes + untied.output_bytes + sum(untied.layer_bytes) == llama8b_q8.tensor_bytes
    # CUDA0 model buffer: 7605 MiB (8B Q8_0, untied) and 2357 MiB (1B F16, tied: embedding copied as output)
    assert mib(estimate_vram(llama8b_q8, None, 4096, 99).weights_bytes) == pytest.approx(7605, abs=1)
    assert mib(estimate_vram(llama1b_f16, None, 4096, 99).weights_bytes) == pytest.approx(2357, abs=1)


@pytest.mark.parametrize(("ctx", "ctk", "parallel", "kv_mib", "compute_mib"), [
    (4096, "f16", None, 512, 112), (32768, "f16", None, 4096, 140), (32768, "q8_0", None, 2176, 192),
    (65536, "q4_0", None, 2304, 352), (32768, "f16", 4, 4096, 116), (32768, "f16", 8, 4096, 112),
])
def test_llama8b_kv_and_compute_match_llama_cpp(llama8b_q8: GgufInfo, ctx: int, ctk: str, parallel: int | None,
                                                 kv_mib: int, compute_mib: int) -> None:
    estimate = estimate_vram(llama8b_q8, None, ctx, 99, ctk, ctk, parallel)
    assert mib(estimate.kv_bytes) == kv_mib
    assert mib(estimate.compute_bytes) == pytest.approx(compute_mib, abs=1)
    assert estimate.runtime_bytes == CUDA_CONTEXT


@pytest.mark.parametrize(("ctx", "ctk", "parallel", "kv_mib", "compute_mib"), [
    (8192, "f16", None, 682, 87), (65536, "f16", None, 1802, 143), (131072, "q8_0", None, 1637, 663),
    (32768, "f16", 2, 988, 92), (16384, "q8_0", 1, 262, 100),
])
def test_gemma3_sliding_window_layers_keep_a_short_cache(gemma3_4b: GgufInfo, ctx: int, ctk: str,
                                                         parallel: int | None, kv_mib: int,
                                                         compute_mib: int) -> None:
    estimate = estimate_vram(gemma3_4b, None, ctx, 99, ctk, ctk, parallel)
    assert round(estimate.kv_bytes / MIB) == kv_mib
    assert mib(estimate.compute_bytes) == pytest.approx(compute_mib, abs=2)


def test_without_the_sliding_window_every_layer_would_cache_the_whole_context(gemma3_4b: GgufInfo) -> None:
    full = replace(gemma3_4b, sliding_window=None)
    assert estimate_vram(full, None, 65536, 99).kv_bytes == 34 * 65536 * 4096


def test_partial_offload_places_the_last_layers_and_the_output(llama8b_q8: GgufInfo) -> None:
    layout = read_weight_layout(llama8b_q8.path)
    estimate = estimate_vram(llama8b_q8, None, 8192, 17)   # 16 layers + output; measured 4069 MiB, 512 MiB KV
    assert estimate.weights_bytes == sum(layout.layer_bytes[16:]) + layout.output_bytes
    assert mib(estimate.weights_bytes) == pytest.approx(4069, abs=1)
    assert mib(estimate.kv_bytes) == 512
    # measured 156 MiB: the activations (116) plus the largest host tensor copied for prompt batches
    assert estimate.compute_bytes == 116 * MIB + max(layout.largest_bytes[:15])
    assert estimate.total_bytes / GIB == pytest.approx(5.21, rel=0.01)   # pynvml read 5.21 GiB
    assert estimate_vram(llama8b_q8, None, 8192, 0).weights_bytes == 0
    assert any("partial offload" in note for note in estimate.notes)


def test_no_flash_attention_pays_for_the_kq_scores_and_cublas(llama8b_q8: GgufInfo) -> None:
    estimate = estimate_vram(llama8b_q8, None, 16384, 99, flash_attn=False)
    assert mib(estimate.compute_bytes) == pytest.approx(1092, abs=3)
    assert estimate.runtime_bytes == CUDA_CONTEXT + CUBLAS
    forced = estimate_vram(llama8b_q8, None, 16384, 99, "q8_0", "q8_0", flash_attn=False)
    assert forced == estimate_vram(llama8b_q8, None, 16384, 99, "q8_0", "q8_0")   # quantized V forces FA


def test_draft_model_adds_its_weights_kv_and_compute(llama8b_q8: GgufInfo, llama1b_f16: GgufInfo) -> None:
    estimate = estimate_vram(llama8b_q8, llama1b_f16, 65536, 99, "q8_0", "q8_0")
    assert mib(estimate.weights_bytes + estimate.draft_weights_bytes) == pytest.approx(9963, abs=1)
    assert mib(estimate.kv_bytes + estimate.draft_kv_bytes) == 6400    # draft cache stays f16 (-ctkd)
    assert mib(estimate.compute_bytes) == pytest.approx(476, abs=1)
    assert estimate.runtime_bytes == CUDA_CONTEXT + CUBLAS + EXTRA_CONTEXT   # the f16 draft's context uses cuBLAS
    assert mib(estimate.runtime_bytes) == pytest.approx(713, rel=0.02)
    assert "draft 4.3" in estimate.describe()


def test_context_is_padded_and_zero_means_the_training_context(llama8b_q8: GgufInfo) -> None:
    assert estimate_vram(llama8b_q8, None, 1000, 99).kv_bytes == estimate_vram(llama8b_q8, None, 1024, 99).kv_bytes
    assert estimate_vram(llama8b_q8, None, 0, 99).kv_bytes == 32 * 131072 * 4096


@given(st.integers(1, 1 << 20), st.sampled_from(sorted(CACHE_TYPE_BLOCKS)))
def test_kv_grows_with_context_and_shrinks_with_quantization(ctx: int, cache_type: str) -> None:
    info = GgufInfo(Path("/nonexistent.gguf"), 0, "llama", None, 32, 131072, 4096, 32, 8, 128, 128, None, 0, 7,
                    0, 8 * GIB, {})
    small = estimate_vram(info, None, ctx, 99, cache_type, cache_type)
    large = estimate_vram(info, None, ctx + 256, 99, cache_type, cache_type)
    assert large.kv_bytes > small.kv_bytes
    assert small.kv_bytes <= estimate_vram(info, None, ctx, 99, "f32", "f32").kv_bytes
    assert "tensor table unread" in small.notes[0]


def test_hybrid_model_caches_only_its_attention_layers() -> None:
    metadata = {"qwen35.full_attention_interval": 4, "qwen35.ssm.conv_kernel": 4, "qwen35.ssm.inner_size": 6144,
                "qwen35.ssm.state_size": 128, "qwen35.ssm.group_count": 16}
    info = GgufInfo(Path("/nonexistent.gguf"), 0, "qwen35", None, 64, 262144, 5120, 24, 4, 256, 256, None, 0,
                    15, 0, 16 * GIB, metadata)
    estimate = estimate_vram(info, None, 131072, 99, "q4_0", "q4_0", None)
    assert estimate.kv_bytes == 16 * 131072 * 2 * (1024 // 32 * 18)
    assert estimate.recurrent_bytes == 48 * 4 * 4 * (3 * (6144 + 2 * 16 * 128) + 128 * 6144)


def gpu(free_gib: float) -> GpuState:
    device = GpuDevice(0, "NVIDIA GeForce RTX 3090 Ti", "GPU-0", 24 * GIB, int(free_gib * GIB), 0)
    return GpuState((device,), "580.159.04", "13.0")


def estimate_of(total_gib: float) -> VramEstimate:
    return VramEstimate(int(total_gib * GIB), 0, 0, 0, 0)


def test_fit_check_counts_what_stopping_the_current_server_frees() -> None:
    result = fit_check(estimate_of(16.0), gpu(2.0), int(15.9 * GIB))
    assert result.status == "ok" and result.ok
    assert result.message == "needs ~16.0 GiB, 17.9 GiB free after stopping the current server"
    assert fit_check(estimate_of(16.0), gpu(2.0)).status == "not_ok"


def test_fit_check_refuses_what_does_not_fit() -> None:
    result = fit_check(estimate_of(20.4), gpu(17.9))
    assert result.status == "not_ok" and not result.ok
    assert result.message.startswith("needs ~20.4 GiB, 17.9 GiB free now: does not fit")
    with pytest.raises(PreflightError, match="does not fit"):
        result.raise_if_not_ok()


def test_fit_check_keeps_headroom() -> None:
    assert fit_check(estimate_of(17.8), gpu(17.9)).status == "not_ok"
    assert fit_check(estimate_of(17.8), gpu(17.9), headroom_bytes=0).status == "ok"


def test_fit_check_without_gpu_is_skipped_not_failed() -> None:
    result = fit_check(estimate_of(20.4), NoGpu("the NVIDIA kernel driver is not loaded"))
    assert result.status == "skipped" and result.ok and result.available_bytes is None
    assert result.message.startswith("no NVIDIA GPU: VRAM check skipped")
    result.raise_if_not_ok()


def test_describe_names_each_part() -> None:
    estimate = VramEstimate(int(15.9 * GIB), int(3.2 * GIB), 0, int(0.7 * GIB), int(0.6 * GIB))
    assert estimate.describe() == "needs ~20.4 GiB: weights 15.9, KV 3.2, compute 0.7, CUDA 0.6"
