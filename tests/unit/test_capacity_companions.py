"""The capacity check counts routing's companions: a third server's threads must fit beside the serving
one and every companion (specd.deploy.capacity over specd.deploy.companions)."""

from __future__ import annotations

from pathlib import Path

from specd.deploy.capacity import HostResources, fits_beside
from specd.gpu.gguf import read_gguf_info
from specd.unit.parse import UnitCommand
from tests.gguf_factory import write_gguf

TWO_CORES = HostResources(available_ram=lambda: 64 << 30, cores=lambda: 2, physical_cores=lambda: 2)


def server(threads: int) -> UnitCommand:
    return UnitCommand(["llama-server", "-m", "/m.gguf", "-ngl", "0", "--threads", str(threads)], {})


def test_a_third_one_thread_server_does_not_fit_two_cores_beside_a_companion(tmp_path: Path) -> None:
    model = read_gguf_info(write_gguf(tmp_path / "m.gguf"))
    argv = ["llama-server", "-m", str(tmp_path / "m.gguf"), "-ngl", "0", "--threads", "1"]
    alone = fits_beside(argv, {}, model, None, server(1), resources=TWO_CORES)
    assert alone.fits and "1 + 1 threads on 2 cores" in alone.reason
    crowded = fits_beside(argv, {}, model, None, server(1), resources=TWO_CORES, also=[server(1)])
    assert not crowded.fits
    assert "1 + 1 (companions) + 1 threads on 2 cores" in crowded.reason
