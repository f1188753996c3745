"""Does the new server fit beside the running one? The answer `--strategy auto`, routing and the shadow
bench act on (specd.deploy.capacity): host memory and thread pools on the CPU, free VRAM on a GPU, and
"does not fit" whenever the memory cannot be estimated (then auto restarts, as before blue-green)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from specd.deploy.capacity import HostResources, both_fit, capacity_check, fits_beside, text_fits, threads_of
from specd.deploy.preflight import Preflight
from specd.gpu.fit import HEADROOM
from specd.gpu.gguf import GgufInfo, read_gguf_info
from specd.gpu.settings import settings_from_argv
from specd.gpu.vram import estimate_vram
from specd.profiles.load import load_profile
from specd.unit.parse import UnitCommand
from tests.fakes.fake_nvml import FakeNvml, card
from tests.gguf_factory import F16, write_gguf, write_header

PLENTY = 64 << 30


def box(*, ram: int = PLENTY, cores: int = 8, physical: int = 4) -> HostResources:
    return HostResources(available_ram=lambda: ram, cores=lambda: cores, physical_cores=lambda: physical)


@pytest.fixture
def model(tmp_path: Path) -> GgufInfo:
    return read_gguf_info(write_gguf(tmp_path / "m.gguf"))


def host_bytes(model: GgufInfo, draft: GgufInfo | None, argv: list[str], env: dict[str, str]) -> int:
    """specd.gpu's estimate of the server with every layer counted, less the CUDA runtime: its host memory."""
    settings = replace(settings_from_argv(argv, env), n_gpu_layers=None, draft_n_gpu_layers=None)
    estimate = estimate_vram(model, draft, 0, None, settings=settings)
    return estimate.total_bytes - estimate.runtime_bytes


def cpu_argv(model_path: str, *extra: str) -> list[str]:
    return ["llama-server", "-m", model_path, "-ngl", "0", *extra]


def running(*extra: str) -> UnitCommand:
    return UnitCommand(["llama-server", "-m", "/old.gguf", "-ngl", "0", *extra], {})


@pytest.mark.parametrize(("argv", "env", "threads"), [
    (["-t", "3"], {}, 3),
    (["--threads", "5"], {}, 5),
    ([], {"LLAMA_ARG_THREADS": "6"}, 6),
    (["-t", "2"], {"LLAMA_ARG_THREADS": "6"}, 2),  # the command line wins over the environment
    ([], {}, 4),  # llama-server's default: the physical cores
    (["-t", "-1"], {}, 4),  # -1 and 0 mean the default too
    (["-t", "0"], {}, 4),
    (["-t", "many"], {}, 4),  # not a number: llama-server would refuse it; counted as the default
])
def test_the_threads_a_server_runs_are_read_from_its_flags_its_environment_or_its_default(
        argv: list[str], env: dict[str, str], threads: int) -> None:
    assert threads_of(["llama-server", *argv], env, box(physical=4)) == threads


def test_a_model_specd_cannot_read_never_fits(model: GgufInfo) -> None:
    verdict = fits_beside(cpu_argv("/m.gguf"), {}, None, None, running(), resources=box())
    assert not verdict.fits
    assert "cannot be estimated" in verdict.reason and "not a local GGUF" in verdict.reason


def test_a_command_line_the_estimate_cannot_read_never_fits(model: GgufInfo) -> None:
    verdict = fits_beside(cpu_argv("/m.gguf", "-c", "lots"), {}, model, None, running(), resources=box())
    assert not verdict.fits
    assert verdict.reason.startswith("its memory cannot be estimated (")


def test_host_memory_must_hold_the_new_server_and_the_headroom_beside_the_old(model: GgufInfo,
                                                                            tmp_path: Path) -> None:
    argv = cpu_argv(str(tmp_path / "m.gguf"), "-t", "1")
    needed = host_bytes(model, None, argv, {})
    exact = fits_beside(argv, {}, model, None, running("-t", "1"), resources=box(ram=needed + HEADROOM))
    assert exact.fits, exact.reason
    short = fits_beside(argv, {}, model, None, running("-t", "1"), resources=box(ram=needed + HEADROOM - 1))
    assert not short.fits
    assert "does not fit beside the running server" in short.reason and "host memory ~" in short.reason


def test_the_thread_pools_of_both_servers_and_the_companions_must_fit_the_cores(model: GgufInfo,
                                                                              tmp_path: Path) -> None:
    argv = cpu_argv(str(tmp_path / "m.gguf"), "-t", "2")
    full = fits_beside(argv, {}, model, None, running("-t", "2"), resources=box(cores=4))
    assert full.fits and "2 + 2 threads on 4 cores" in full.reason
    over = fits_beside(argv, {}, model, None, running("-t", "3"), resources=box(cores=4))
    assert not over.fits and "3 + 2 threads on 4 cores" in over.reason and "share cores" in over.reason
    crowded = fits_beside(argv, {}, model, None, running("-t", "1"), resources=box(cores=4),
                          also=[running("-t", "2")])
    assert not crowded.fits and "1 + 2 (companions) + 2 threads on 4 cores" in crowded.reason


def test_nothing_running_counts_no_old_threads(model: GgufInfo, tmp_path: Path) -> None:
    verdict = fits_beside(cpu_argv(str(tmp_path / "m.gguf"), "-t", "4"), {}, model, None, None,
                          resources=box(cores=4))
    assert verdict.fits and "0 + 4 threads on 4 cores" in verdict.reason


def test_the_old_servers_environment_gives_its_threads(model: GgufInfo, tmp_path: Path) -> None:
    old = UnitCommand(["llama-server", "-m", "/old.gguf", "-ngl", "0"], {"LLAMA_ARG_THREADS": "3"})
    verdict = fits_beside(cpu_argv(str(tmp_path / "m.gguf"), "-t", "2"), {}, model, None, old,
                          resources=box(cores=4))
    assert not verdict.fits and "3 + 2 threads" in verdict.reason


def test_on_a_gpu_the_free_vram_decides_and_threads_are_not_counted(model: GgufInfo, tmp_path: Path) -> None:
    argv = ["llama-server", "-m", str(tmp_path / "m.gguf"), "-ngl", "99", "-t", "64"]
    roomy = fits_beside(argv, {}, model, None, running("-t", "64"), nvml=FakeNvml([card(0, 20.0)]),
                        resources=box(cores=2))
    assert roomy.fits and roomy.reason.startswith("VRAM beside the running server: ")
    full = fits_beside(argv, {}, model, None, running(), nvml=FakeNvml([card(0, 0.0)]), resources=box())
    assert not full.fits and full.reason.startswith("VRAM beside the running server: ")


def test_a_cpu_profile_on_a_gpu_box_is_judged_by_host_memory_and_threads(model: GgufInfo,
                                                                        tmp_path: Path) -> None:
    verdict = fits_beside(cpu_argv(str(tmp_path / "m.gguf"), "-t", "2"), {}, model, None, running("-t", "2"),
                          nvml=FakeNvml([card(0, 0.0)]), resources=box(cores=2))
    assert not verdict.fits and "2 + 2 threads on 2 cores" in verdict.reason


def test_a_rollbacks_unit_text_is_judged_by_the_models_its_command_line_names(tmp_path: Path) -> None:
    write_gguf(tmp_path / "m.gguf")
    text = f"[Service]\nExecStart=llama-server -m {tmp_path / 'm.gguf'} -ngl 0 -t 2\n"
    fits = text_fits(text, running("-t", "2"), resources=box(cores=4))
    assert fits.fits and "2 + 2 threads on 4 cores" in fits.reason
    missing = f"[Service]\nExecStart=llama-server -m {tmp_path / 'gone.gguf'} -ngl 0 -t 1\n"
    verdict = text_fits(missing, None, resources=box(cores=4))
    assert not verdict.fits and verdict.reason.startswith("its memory cannot be estimated (")
    no_draft = f"[Service]\nExecStart=llama-server -m {tmp_path / 'm.gguf'} -md {tmp_path / 'gone.gguf'} -t 1\n"
    assert not text_fits(no_draft, None, resources=box(cores=4)).fits


def test_the_check_asks_for_the_companions_each_time_and_judges_a_unit_text(tmp_path: Path) -> None:
    write_gguf(tmp_path / "m.gguf")
    companions: list[UnitCommand] = []
    check = capacity_check(None, beside=lambda: list(companions))
    text = f"[Service]\nExecStart=llama-server -m {tmp_path / 'm.gguf'} -ngl 0 -t 1\n"
    old = running("-t", "1")
    alone = check(text, old)
    companions.extend([running("-t", "64")])  # a companion started since: counted on the next check
    crowded = check(text, old)
    assert "(companions)" in crowded.reason and "(companions)" not in alone.reason
    assert "1 + 1 threads" in alone.reason  # the running server's thread is counted too
    assert not crowded.fits


def test_a_switchs_preflight_is_judged_with_its_profiles_environment_and_the_companions(tmp_path: Path) -> None:
    model_path = write_gguf(tmp_path / "m.gguf")
    (tmp_path / "p.toml").write_text(f'binary = "/usr/bin/true"\nmodel = "{model_path}"\nalias = "m"\nport = 8080\n'
                                     '[env]\nLLAMA_ARG_THREADS = "2"\n')
    argv = ["llama-server", "-m", str(model_path), "-ngl", "0"]  # the threads come from the profile's [env]
    pre = Preflight(load_profile(tmp_path, "p"), argv, "", read_gguf_info(model_path), None)
    companions: list[UnitCommand] = []
    check = capacity_check(FakeNvml([]), beside=lambda: list(companions))  # no GPU: the CPU rule
    alone = check(pre, running("-t", "1"))
    assert "1 + 2 threads on" in alone.reason and "(companions)" not in alone.reason
    companions.append(running("-t", "64"))
    crowded = check(pre, running("-t", "1"))
    assert not crowded.fits and "1 + 64 (companions) + 2 threads on" in crowded.reason
    assert not check(pre, running("-t", "64")).fits


def test_the_check_reads_the_gpus_it_was_given_for_a_unit_text_and_a_preflight(tmp_path: Path) -> None:
    model_path = write_gguf(tmp_path / "m.gguf")
    full_gpu = FakeNvml([card(0, 0.0)])
    text = f"[Service]\nExecStart=llama-server -m {model_path} -ngl 99\n"
    verdict = capacity_check(full_gpu)(text, None)
    assert not verdict.fits and verdict.reason.startswith("VRAM beside the running server: ")
    (tmp_path / "g.toml").write_text(f'binary = "/usr/bin/true"\nmodel = "{model_path}"\nalias = "m"\nport = 8080\n')
    pre = Preflight(load_profile(tmp_path, "g"), ["llama-server", "-m", str(model_path), "-ngl", "99"], "",
                    read_gguf_info(model_path), None)
    verdict = capacity_check(full_gpu)(pre, None)
    assert not verdict.fits and verdict.reason.startswith("VRAM beside the running server: ")


def test_without_a_gpu_a_server_that_names_no_layer_count_is_judged_by_the_cpu_rule(model: GgufInfo,
                                                                                  tmp_path: Path) -> None:
    argv = ["llama-server", "-m", str(tmp_path / "m.gguf"), "-t", "1"]  # llama-server's default -ngl
    verdict = fits_beside(argv, {}, model, None, None, nvml=FakeNvml([]), resources=box(cores=4))
    assert verdict.fits and "0 + 1 threads on 4 cores" in verdict.reason


def test_servers_that_name_no_threads_count_the_boxs_physical_cores(model: GgufInfo, tmp_path: Path) -> None:
    argv = cpu_argv(str(tmp_path / "m.gguf"))
    verdict = fits_beside(argv, {}, model, None, running(), resources=box(cores=16, physical=3),
                          also=[running()])
    assert "3 + 3 (companions) + 3 threads on 16 cores" in verdict.reason and verdict.fits
    (tmp_path / "p.toml").write_text(f'binary = "/usr/bin/true"\nmodel = "{tmp_path / "m.gguf"}"\nalias = "m"\n'
                                     "port = 8080\n")
    pre = Preflight(load_profile(tmp_path, "p"), argv, "", model, None)
    assert "3 + 3 threads on 4 cores" in both_fit(pre, running(), resources=box(cores=4, physical=3)).reason


def test_a_cpu_profile_needs_host_memory_for_its_weights(tmp_path: Path) -> None:
    """-ngl 0 puts no layer on a GPU: the VRAM estimate is zero, but the weights are in host memory."""
    path = tmp_path / "1b.gguf"
    big = write_header(path, "llama", 16, 2048, 32, 8, 8192, 64, 128256, True, F16)  # 2.3 GiB of f16 weights
    argv = ["llama-server", "-m", str(path), "-ngl", "0", "-t", "1", "-c", "2048"]
    verdict = fits_beside(argv, {}, big, None, None, resources=box(ram=2 << 30))
    assert not verdict.fits and "host memory ~2.4" in verdict.reason


def test_the_draft_model_and_the_environments_settings_count_in_host_memory(tmp_path: Path) -> None:
    path = tmp_path / "1b.gguf"  # a 1B-shaped header: gigabytes of weights, so every part shows
    big = write_header(path, "llama", 16, 2048, 32, 8, 8192, 64, 128256, True, F16)
    argv = ["llama-server", "-m", str(path), "-ngl", "0", "-t", "1", "-c", "2048"]
    just_enough = host_bytes(big, None, argv, {}) + HEADROOM  # the target alone fits, exactly
    assert fits_beside(argv, {}, big, None, None, resources=box(ram=just_enough)).fits
    assert not fits_beside(argv, {}, big, big, None, resources=box(ram=just_enough)).fits  # + a draft
    assert not fits_beside(argv[:-2], {}, big, None, None, resources=box(ram=just_enough)).fits  # its default cache
    assert fits_beside(argv[:-2], {"LLAMA_ARG_CTX_SIZE": "2048"}, big, None, None,
                       resources=box(ram=just_enough)).fits  # the same cache, set in the unit's environment
    (tmp_path / "p.toml").write_text(f'binary = "/usr/bin/true"\nmodel = "{path}"\nalias = "m"\nport = 8080\n')
    with_draft = Preflight(load_profile(tmp_path, "p"), argv, "", big, big)
    assert not both_fit(with_draft, None, resources=box(ram=just_enough)).fits
    text = f"[Service]\nExecStart=llama-server -m {path} -md {path} -ngl 0 -t 1 -c 2048\n"
    assert not text_fits(text, None, resources=box(ram=just_enough)).fits
    assert text_fits(text.replace(f"-md {path} ", ""), None, resources=box(ram=just_enough)).fits


def one_b(tmp_path: Path) -> tuple[Path, GgufInfo]:
    """A 1B-shaped header (2.3 GiB of f16 weights): big enough that a draft or a long context shows in GiB."""
    path = tmp_path / "1b.gguf"
    return path, write_header(path, "llama", 16, 2048, 32, 8, 8192, 64, 128256, True, F16)


def test_on_a_gpu_the_new_servers_environment_and_draft_count_in_its_vram(tmp_path: Path) -> None:
    path, big = one_b(tmp_path)
    argv = ["llama-server", "-m", str(path), "-ngl", "99", "-c", "2048"]
    gpu = FakeNvml([card(0, 4.0)])  # the target alone fits; twice its weights, or its default cache, do not
    assert fits_beside(argv, {}, big, None, running(), nvml=gpu).fits
    assert not fits_beside(argv, {}, big, big, running(), nvml=gpu).fits  # + a draft of the same size
    assert not fits_beside(argv[:-2], {}, big, None, running(), nvml=gpu).fits  # the model's own context
    assert fits_beside(argv[:-2], {"LLAMA_ARG_CTX_SIZE": "2048"}, big, None, running(), nvml=gpu).fits  # [env]


def test_beside_the_running_server_its_vram_is_not_counted_as_freed(tmp_path: Path) -> None:
    """A switch's preflight counts the old server's VRAM as freed (it will be stopped); beside it, it is not.
    NVML lists the old server's VRAM under this test's own PID, a real process below every PID tree's root."""
    path, big = one_b(tmp_path)
    argv = ["llama-server", "-m", str(path), "-ngl", "99", "-c", "2048"]
    held = FakeNvml([card(0, 1.0)], processes={0: [(os.getpid(), 20 << 30)]})  # 20 GiB held by the old server
    verdict = fits_beside(argv, {}, big, None, running(), nvml=held)
    assert not verdict.fits and verdict.reason.startswith("VRAM beside the running server: ")


def test_on_the_cpu_a_draft_held_on_the_cpu_by_ngld_0_counts_in_host_memory(tmp_path: Path) -> None:
    path, big = one_b(tmp_path)
    argv = ["llama-server", "-m", str(path), "-ngl", "0", "-t", "1", "-c", "2048"]
    just_enough = host_bytes(big, None, argv, {}) + HEADROOM  # the target alone fits, exactly
    with_draft = [*argv, "-md", str(path), "-ngld", "0"]
    assert not fits_beside(with_draft, {}, big, big, None, resources=box(ram=just_enough)).fits
