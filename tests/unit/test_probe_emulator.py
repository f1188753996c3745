"""The per-request probe against specd-emulator (the llama-server performance EMULATOR), both ways: as
the pinned build (per-request draft settings compiled out: it drafts anyway) and with
--emulator-per-request-draft, as older builds that honoured `speculative.n_max`. The real pinned binary's
verdict is tests/system/test_routing.py's."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from specd.routing.probe import probe
from tests.fakes.proxy_fakes import eventually, free_port


def answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def emulator(*extra: str) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "specd.emulator.server", "--port", str(port), "--alias", "emu",
                                "--spec-type", "draft-mtp", "--emulator-time-scale", "0.001", *extra],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        eventually(lambda: answers(url), "the emulator to come up", timeout_s=60)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def test_a_build_without_per_request_draft_settings_is_found_out() -> None:
    with emulator() as url, httpx.Client(timeout=30) as client:
        found = probe(client, url, "emu")
    assert found.verdict == "ignored" and found.draft_n and found.draft_n_off


def test_a_build_that_honours_them_is_found_out_too() -> None:
    with emulator("--emulator-per-request-draft") as url, httpx.Client(timeout=30) as client:
        found = probe(client, url, "emu")
    assert found.verdict == "honoured" and found.draft_n and not found.draft_n_off
