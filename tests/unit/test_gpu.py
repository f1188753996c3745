"""specd.gpu.nvml: the no-GPU path for real, the NVML logic through a fake backend (named so)."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from collections.abc import Iterator

import pytest

from specd.gpu.nvml import (
    GIB,
    GpuState,
    NoGpu,
    ProcessVram,
    PynvmlBackend,
    probe_gpus,
    process_tree,
    process_vram,
    vram_of_pids,
)
from tests.fakes.fake_nvml import FakeNvml, card


def test_real_probe_never_raises_and_explains_a_missing_gpu() -> None:
    state = probe_gpus()
    if isinstance(state, NoGpu):
        assert state.reason and "\n" not in state.reason
        assert state.describe().startswith("no NVIDIA GPU: ")
    else:
        assert state.devices and state.driver_version


def test_real_process_vram_without_gpu_is_a_state_not_an_exception() -> None:
    reading = process_vram(os.getpid())
    assert isinstance(reading, (NoGpu, ProcessVram))


def test_probe_lists_devices_and_sums_free_memory() -> None:
    fake = FakeNvml([card(0, 17.9), card(1, 3.5)])
    state = probe_gpus(fake)
    assert isinstance(state, GpuState)
    assert [d.index for d in state.devices] == [0, 1]
    assert state.free_bytes == int(17.9 * GIB) + int(3.5 * GIB)
    assert state.cuda_version == "13.0"
    assert "GPU 0 NVIDIA GeForce RTX 3090 Ti: 17.9 of 24.0 GiB free" in state.describe()
    assert fake.shutdowns == 1


@pytest.mark.parametrize("step", ["init", "count", "device"])
def test_probe_turns_nvml_failures_into_no_gpu(step: str) -> None:
    fake = FakeNvml([card(0, 10)], fail_at=step)
    state = probe_gpus(fake)
    assert state == NoGpu(f"fake failure in {step}")


def test_probe_with_zero_devices_is_no_gpu() -> None:
    state = probe_gpus(FakeNvml([]))
    assert isinstance(state, NoGpu)
    assert "reports no GPU" in state.reason


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def test_process_tree_includes_children(child: subprocess.Popen[bytes]) -> None:
    assert process_tree(os.getpid())[0] == os.getpid()
    assert child.pid in process_tree(os.getpid())


def test_process_tree_of_a_gone_pid_is_just_that_pid() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert process_tree(gone.pid) == (gone.pid,)


def test_process_vram_sums_the_tree_over_devices(child: subprocess.Popen[bytes]) -> None:
    me = os.getpid()
    fake = FakeNvml([card(0, 1), card(1, 1)], {
        0: [(me, 2 * GIB), (child.pid, 1 * GIB), (999_999_999, 5 * GIB)],
        1: [(child.pid, GIB // 2)],
    })
    reading = process_vram(me, nvml=fake)
    assert isinstance(reading, ProcessVram)
    assert reading.used_bytes == 3 * GIB + GIB // 2
    assert reading.by_device == ((0, 3 * GIB), (1, GIB // 2))
    only_me = process_vram(me, include_children=False, nvml=fake)
    assert isinstance(only_me, ProcessVram) and only_me.used_bytes == 2 * GIB


def test_vram_of_pids_counts_a_pid_listed_twice_once_and_reports_hidden_usage() -> None:
    reading = vram_of_pids(10, [10, 11], {0: [(10, 100), (10, 100), (11, None)]})
    assert reading.used_bytes == 100
    assert reading.unreported_pids == (11,)
    assert "NVML hides the usage of PID 11" in reading.describe()


def test_process_vram_without_nvml_is_no_gpu() -> None:
    reading = process_vram(os.getpid(), nvml=FakeNvml([], fail_at="init"))
    assert reading == NoGpu("fake failure in init")


class FakePynvmlError(Exception):
    pass


class NVMLError_DriverNotLoaded(FakePynvmlError):
    pass


def fake_pynvml_module() -> types.ModuleType:
    """A fake `pynvml` module: init fails the way it does on a box whose driver is not loaded."""
    module = types.ModuleType("pynvml")
    module.NVMLError = FakePynvmlError  # type: ignore[attr-defined]

    def init() -> None:
        raise NVMLError_DriverNotLoaded("Driver Not Loaded")

    module.nvmlInit = init  # type: ignore[attr-defined]
    module.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    return module


def test_pynvml_backend_names_the_missing_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml_module())
    state = probe_gpus(PynvmlBackend())
    assert state == NoGpu("the NVIDIA kernel driver is not loaded")


def test_pynvml_backend_without_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    state = probe_gpus()
    assert isinstance(state, NoGpu)
    assert "pynvml" in state.reason

