"""The real llama-server started by hand (no systemd) to ask it which id it serves: /v1/models.

Used by the served-id tests; the process is this test's own child, on a free loopback port, and is
stopped by its pid when the block ends."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from specd.setup.sandbox import free_port
from tests.conftest import LLAMA_SERVER


@contextmanager
def running_server(argv: list[str], env: dict[str, str] | None = None, *, timeout_s: float = 120,
                   binary: Path = LLAMA_SERVER) -> Iterator[str]:
    """Start `binary ARGV --host 127.0.0.1 --port FREE` (light settings) and yield its base URL once
    /health answers 200; the log is in the failure message when it never does."""
    port = free_port()
    command = [str(binary), *argv, "--host", "127.0.0.1", "--port", str(port), "-c", "256", "-t", "1",
               "--no-warmup"]
    with running_command(command, port, env, timeout_s=timeout_s) as url:
        yield url


@contextmanager
def running_command(command: list[str], port: int, env: dict[str, str] | None = None, *,
                    timeout_s: float = 120) -> Iterator[str]:
    """Run `command` as it is (a server that listens on 127.0.0.1:`port`) until /health answers 200."""
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"specd-served-{os.getpid()}-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, **(env or {}), "LLAMA_LOG_COLORS": "off"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:]
                raise AssertionError(f"{command} exited {process.returncode}:\n{tail}")
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{command}: no /health 200 in {timeout_s} s:\n"
                                     f"{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.unlink(missing_ok=True)


def listed_ids(url: str) -> list[str]:
    """/v1/models' ids, first one first (the one clients see; the gate asks for it)."""
    return [str(entry["id"]) for entry in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]]


def hub_cache(root: Path, repo: str, model: Path) -> Path:
    """A Hugging Face cache (hub layout: models--user--name/snapshots/REV/FILE) holding `model` for `repo`,
    which llama-server reads offline for `-hf repo:Q4_K_M` and in router mode ($LLAMA_CACHE)."""
    user, name = repo.split("/")
    snapshot = root / f"models--{user}--{name}" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True, exist_ok=True)
    link = snapshot / f"{name}-Q4_K_M.gguf"
    if not link.exists():
        link.symlink_to(model)
    (root / f"models--{user}--{name}" / "refs").mkdir(exist_ok=True)
    (root / f"models--{user}--{name}" / "refs" / "main").write_text("0" * 40)
    return root
