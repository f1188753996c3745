"""Reading a unit's settings, placing layers over GPUs, the per-GPU fit check and its advice.

Two GPUs are a FAKE NVML (tests/fakes/fake_nvml.py): no machine here has one. The layer placement
is llama.cpp's (llama-model.cpp load_tensors), checked case by case; the two-GPU measurement itself
waits for the two-GPU device kind (benchmarks/gpu_vram/cases.py SPLIT2_CASES).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specd.errors import PreflightError
from specd.gpu.check import vram_check
from specd.gpu.fit import fit_check, visible_devices
from specd.gpu.gguf import GgufInfo
from specd.gpu.nvml import GIB, GpuState
from specd.gpu.placement import place_layers
from specd.gpu.settings import ServerSettings, settings_from_argv
from specd.gpu.vram import VramEstimate, estimate_per_gpu, estimate_vram
from specd.profiles.flags import parse_help
from tests.fakes.fake_nvml import FakeNvml, card
from tests.gguf_factory import F16, Q8_0, write_header

HELP = """----- common params -----

-c,    --ctx-size N                     size of the prompt context (env: LLAMA_ARG_CTX_SIZE)
-ngl,  --gpu-layers, --n-gpu-layers N   max. number of layers to store in VRAM (env: LLAMA_ARG_N_GPU_LAYERS)
-sm,   --split-mode {none,layer,row,tensor}
                                        how to split the model across multiple GPUs (env: LLAMA_ARG_SPLIT_MODE)
-ts,   --tensor-split N0,N1,N2,...      fraction of the model to offload to each GPU (env: LLAMA_ARG_TENSOR_SPLIT)
-ncmoe, --n-cpu-moe N                   keep the MoE weights of the first N layers in the CPU (env: LLAMA_ARG_N_CPU_MOE)
--spec-type none,draft-simple,draft-mtp speculative types
"""


@pytest.fixture(scope="module")
def llama8b(tmp_path_factory: pytest.TempPathFactory) -> GgufInfo:
    return write_header(tmp_path_factory.mktemp("m") / "8b.gguf", "llama", 32, 4096, 32, 8, 14336, 128, 128256,
                        False, Q8_0)


@pytest.fixture(scope="module")
def llama1b(tmp_path_factory: pytest.TempPathFactory) -> GgufInfo:
    return write_header(tmp_path_factory.mktemp("m") / "1b.gguf", "llama", 16, 2048, 32, 8, 8192, 64, 128256,
                        True, F16)


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> GgufInfo:
    """A qwen3moe-shaped header: 8 layers of 256 experts, top-8 (experts written as 3-D tensors)."""
    import numpy as np
    from gguf import GGUFWriter
    from gguf.constants import GGML_QUANT_SIZES

    from specd.gpu.gguf import read_gguf_info

    path = tmp_path_factory.mktemp("m") / "moe.gguf"
    writer = GGUFWriter(path, "qwen3moe")
    for key, value in {"block_count": 8, "embedding_length": 2048, "attention.head_count": 32,
                       "attention.head_count_kv": 4, "attention.key_length": 128, "attention.value_length": 128,
                       "expert_count": 256, "expert_used_count": 8, "expert_feed_forward_length": 768,
                       "context_length": 40960}.items():
        writer.add_uint32(f"qwen3moe.{key}", value)
    shapes = [("token_embd.weight", (2048, 151936)), ("output.weight", (2048, 151936))]
    for i in range(8):
        shapes += [(f"blk.{i}.attn_q.weight", (2048, 4096)), (f"blk.{i}.attn_k.weight", (2048, 512)),
                   (f"blk.{i}.attn_v.weight", (2048, 512)), (f"blk.{i}.attn_output.weight", (4096, 2048)),
                   (f"blk.{i}.ffn_gate_exps.weight", (2048, 768, 256)),
                   (f"blk.{i}.ffn_up_exps.weight", (2048, 768, 256)),
                   (f"blk.{i}.ffn_down_exps.weight", (768, 2048, 256))]
    for name, ne in shapes:
        block, size = GGML_QUANT_SIZES[Q8_0]
        writer.add_tensor_info(name, tuple(reversed(ne)), np.dtype(np.float32), int(np.prod(ne)) // block * size,
                               raw_dtype=Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return read_gguf_info(path)


def test_settings_come_from_flags_their_aliases_and_the_environment() -> None:
    flags = parse_help("llama-server", HELP)
    settings = settings_from_argv(
        ["llama-server", "--ctx-size", "32768", "--gpu-layers", "40", "-sm", "row", "--spec-type", "mtp",
         "--spec-draft-n-max", "5", "-devd", "CUDA1", "--cpu-moe"],
        {"LLAMA_ARG_TENSOR_SPLIT": "3,1", "LLAMA_ARG_CTX_SIZE": "8192", "CUDA_VISIBLE_DEVICES": "1,0"}, flags)
    assert settings.ctx_size == 32768                      # the flag wins over its variable
    assert (settings.n_gpu_layers, settings.split_mode, settings.tensor_split) == (40, "row", (3.0, 1.0))
    assert settings.mtp and settings.n_rs_seq == 5 and settings.draft_devices == (1,)
    assert settings.expert_on_cpu(31) and settings.visible_devices == ("1", "0")
    assert settings_from_argv(["llama-server", "-ngl", "all", "--n-cpu-moe", "3"]).n_gpu_layers is None
    assert not settings_from_argv(["llama-server", "--n-cpu-moe", "3"]).expert_on_cpu(3)


def test_bad_values_name_the_flag() -> None:
    with pytest.raises(PreflightError, match="--ctx-size: 'lots' is not a whole number"):
        settings_from_argv(["llama-server", "-c", "lots"])
    with pytest.raises(PreflightError, match="--split-mode 'diagonal'"):
        settings_from_argv(["llama-server"], {"LLAMA_ARG_SPLIT_MODE": "diagonal"})


def test_layer_split_cuts_the_offloaded_layers_at_the_tensor_split_proportions() -> None:
    # llama.cpp: layer il goes to upper_bound(cumulative splits, (il - i_gpu_start) / n_gpu_layers)
    placement = place_layers(32, None, ServerSettings(tensor_split=(3.0, 1.0)), 2)
    assert placement.layer_device == (0,) * 25 + (1,) * 7 and placement.output_device == 1
    partial = place_layers(32, 17, ServerSettings(tensor_split=(1.0, 1.0)), 2)
    assert partial.layer_device[:16] == (None,) * 16
    assert partial.layer_device[16:] == (0,) * 9 + (1,) * 7 and partial.output_device == 1
    by_free = place_layers(32, None, ServerSettings(), 2, free=(20 * GIB, 60 * GIB))
    assert by_free.layer_device.count(0) == 9                  # 0.25 of 33 offloaded layers
    single = place_layers(32, None, ServerSettings(split_mode="none", main_gpu=1), 2)
    assert set(single.layer_device) == {1} and single.output_device == 1
    with pytest.raises(PreflightError, match="--main-gpu 2: only 2 GPU"):
        place_layers(32, None, ServerSettings(split_mode="none", main_gpu=2), 2)
    unnamed = place_layers(32, None, ServerSettings(tensor_split=(0.0, 0.0, 1.0)), 2, free=(GIB, 3 * GIB))
    assert unnamed.shares == (0.25, 0.75)        # no share for a visible GPU: llama.cpp splits by free memory


def test_gpus_with_no_free_memory_are_split_evenly_not_refused_as_a_bad_tensor_split() -> None:
    full = place_layers(32, None, ServerSettings(), 2, free=(0, 0))  # both cards taken by running servers
    assert full.shares == (0.5, 0.5)


def test_per_gpu_estimate_splits_weights_and_cache_and_pays_a_context_on_each(llama8b: GgufInfo) -> None:
    one = estimate_vram(llama8b, None, 32768, None)
    layer = estimate_per_gpu(llama8b, None, ServerSettings(ctx_size=32768, tensor_split=(3.0, 1.0)), 2)
    assert sorted(layer) == [0, 1]
    assert layer[0].kv_bytes == 25 * 32768 * 4096 and layer[1].kv_bytes == 7 * 32768 * 4096
    assert layer[0].weights_bytes + layer[1].weights_bytes == one.weights_bytes
    assert layer[0].runtime_bytes == layer[1].runtime_bytes == one.runtime_bytes
    row = estimate_per_gpu(llama8b, None, ServerSettings(ctx_size=32768, split_mode="row", tensor_split=(1.0, 1.0)), 2)
    assert row[0].weights_bytes + row[1].weights_bytes == one.weights_bytes
    assert abs(row[0].weights_bytes - row[1].weights_bytes) < 0.1 * one.weights_bytes   # matrices halved
    tensor = estimate_per_gpu(llama8b, None, ServerSettings(ctx_size=32768, split_mode="tensor",
                                                            tensor_split=(2.0, 1.0)), 2)
    # the Meta device cuts the cache by whole KV heads, rounding turning from layer to layer: 8 heads
    # at 2:1 are 5+3 and 6+2 in turn, so GPU 0 holds 11/16 of the cache, not 2/3 (measured: 2816 MiB)
    assert tensor[0].kv_bytes == 2816 * 2**20 and tensor[1].kv_bytes == 1280 * 2**20


def test_a_draft_pinned_to_the_second_gpu_lands_there_alone(llama8b: GgufInfo, llama1b: GgufInfo) -> None:
    settings = settings_from_argv(["llama-server", "-c", "16384", "-sm", "none", "-mg", "0", "-md", "1b.gguf",
                                   "-devd", "CUDA1"])
    per_gpu = estimate_per_gpu(llama8b, llama1b, settings, 2)
    assert per_gpu[0].draft_weights_bytes == 0 and per_gpu[1].weights_bytes == 0
    assert per_gpu[1].draft_weights_bytes > 2 * GIB and per_gpu[1].draft_kv_bytes == 16 * 16384 * 2048
    assert per_gpu[1].runtime_bytes > per_gpu[0].runtime_bytes      # the f16 draft brings cuBLAS along


def test_visible_devices_pick_and_order_the_gpus_by_index_or_uuid() -> None:
    state = GpuState((card(0, 20.0), card(1, 10.0), card(2, 5.0)), "580", "13.0")
    assert [d.index for d in visible_devices(state, ("2", "0"))] == [2, 0]
    assert [d.index for d in visible_devices(state, ("GPU-1",))] == [1]
    assert [d.index for d in visible_devices(state, ("1", "7", "0"))] == [1]        # CUDA stops at a bad entry
    assert visible_devices(state, None) == state.devices


def test_every_gpu_must_fit_its_share(llama8b: GgufInfo, tmp_path: Path) -> None:
    fake = FakeNvml([card(0, 20.0), card(1, 3.0)])
    argv = ["llama-server", "-c", "32768", "-ts", "1,1"]
    result = vram_check(argv, {}, llama8b, None, nvml=fake)
    assert not result.ok and result.status == "not_ok"
    assert result.message.startswith("GPU 1 (NVIDIA GeForce RTX 3090 Ti): 6.5 GiB estimated, +3% margin for "
                                     "layer split, 3.0 of 24.0 GiB free now")      # GPU 0 fits, GPU 1 does not
    assert "GPU 0" not in result.message.split(": does not fit")[0]
    assert vram_check([*argv[:3], "-ts", "7,1"], {}, llama8b, None, nvml=fake).ok
    # the same split onto the swapped cards: CUDA_VISIBLE_DEVICES=1,0 makes the small card CUDA device 0
    swapped = vram_check([*argv[:3], "-ts", "7,1"], {"CUDA_VISIBLE_DEVICES": "1,0"}, llama8b, None, nvml=fake)
    assert not swapped.ok and "GPU 1" in swapped.message
    only_one = vram_check(argv, {"CUDA_VISIBLE_DEVICES": "0"}, llama8b, None, nvml=fake)
    assert only_one.ok and "GPU 1" not in only_one.message


def test_the_current_servers_share_counts_as_free_on_its_own_gpu(llama8b: GgufInfo) -> None:
    import os

    me = os.getpid()
    fake = FakeNvml([card(0, 2.0), card(1, 20.0)], {0: [(me, int(18 * GIB))]})
    freed = vram_check(["llama-server", "-c", "32768", "-sm", "none"], {}, llama8b, None, me, nvml=fake)
    assert freed.ok and "after stopping the current server" in freed.message
    elsewhere = vram_check(["llama-server", "-c", "32768", "-sm", "none", "-mg", "1"], {}, llama8b, None, me,
                           nvml=fake)
    assert elsewhere.ok and "20.0 GiB free now" in elsewhere.message


def test_a_profile_that_does_not_fit_is_told_its_biggest_parts_and_what_to_change(
        llama8b: GgufInfo, moe: GgufInfo) -> None:
    state = GpuState((card(0, 9.0),), "580", "13.0")
    dense = fit_check(estimate_vram(llama8b, None, 65536, None), state)
    assert (dense.message.startswith("needs ~")
            and "does not fit (biggest: KV cache 8.0 GiB, weights 7.4 GiB" in dense.message)
    assert dense.hint is not None
    for change in ("a smaller ctx_size", "cache_type_k/cache_type_v = q8_0", "n_gpu_layers"):
        assert change in dense.hint
    assert "--n-cpu-moe" not in dense.hint
    with pytest.raises(PreflightError, match="biggest: KV cache") as raised:
        dense.raise_if_not_ok()
    assert "hint: to fit, try" in str(raised.value)
    experts = fit_check(estimate_vram(moe, None, 16384, None), GpuState((card(0, 8.0),), "580", "13.0"))
    assert experts.hint is not None and "args --n-cpu-moe" in experts.hint
    needed = int(experts.hint.split("args --n-cpu-moe ")[1].split()[0])
    settings = ServerSettings(ctx_size=16384, n_cpu_moe=needed)
    assert fit_check(estimate_vram(moe, None, 0, None, settings=settings), GpuState((card(0, 8.0),), "580", "13.0")).ok
    fewer = ServerSettings(ctx_size=16384, n_cpu_moe=needed - 1)        # the advice is the least that fits
    assert not fit_check(estimate_vram(moe, None, 0, None, settings=fewer), GpuState((card(0, 8.0),), "580", "13.0")).ok


def test_experts_in_host_memory_leave_the_gpu_but_keep_a_copy_margin(moe: GgufInfo) -> None:
    everything = estimate_vram(moe, None, 16384, None)
    offloaded = estimate_vram(moe, None, 0, None, settings=ServerSettings(ctx_size=16384, cpu_moe=True))
    expert_tensor = 2048 * 768 * 256 // 32 * 34          # 408 MiB: more than the fit check's headroom
    assert everything.weights_bytes - offloaded.weights_bytes == 8 * 3 * expert_tensor
    # The compute buffer now holds a copy of one host expert tensor (for prompt batches), in place of
    # part of the graph's own temporaries: the measured rule is specd.gpu.expert_copies.
    assert offloaded.compute_bytes >= expert_tensor > everything.compute_bytes
    assert offloaded.margin_bytes == expert_tensor and everything.margin_bytes == 0
    short_of_a_copy = GpuState((card(0, offloaded.total_bytes / GIB + 0.3),), "580", "13.0")
    assert not fit_check(offloaded, short_of_a_copy).ok     # 0.3 GiB beyond the estimate: less than a copy
    assert fit_check(offloaded, GpuState((card(0, offloaded.total_bytes / GIB + 0.45),), "580", "13.0")).ok


def test_a_split_that_names_a_gpu_the_server_will_not_see_is_refused(llama8b: GgufInfo) -> None:
    per_gpu = {0: VramEstimate(GIB, 0, 0, 0, 0), 1: VramEstimate(GIB, 0, 0, 0, 0)}
    result = fit_check(per_gpu, GpuState((card(0, 20.0),), "580", "13.0"))
    assert not result.ok and "CUDA device 1 but the server sees 1 GPU" in result.message


def test_status_shows_each_gpus_share_of_the_servers_process_tree() -> None:
    import os
    import subprocess
    import sys

    from specd.deploy.status import vram_of_server

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        me = os.getpid()
        fake = FakeNvml([card(0, 1.0), card(1, 1.0)], {0: [(me, int(9.5 * GIB)), (1, GIB)],
                                                      1: [(child.pid, int(3.25 * GIB))]})
        shown = vram_of_server(me, nvml=fake)
        assert shown["vram"] == "GPU 0 9.50 GiB, GPU 1 3.25 GiB (12.75 GiB in all)"   # PID 1 is not ours
        assert shown["vram_by_gpu"] == {"0": int(9.5 * GIB), "1": int(3.25 * GIB)}
        one = vram_of_server(me, nvml=FakeNvml([card(0, 1.0)], {0: [(me, int(9.5 * GIB))]}))
        assert one["vram"] == "GPU 0 9.50 GiB"
        assert "vram" not in vram_of_server(me, nvml=FakeNvml([], fail_at="init"))
    finally:
        child.kill()
        child.wait()
