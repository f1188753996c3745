"""Can this llama-server load a model with this `--split-mode`? Asked of the binary itself.

Whether a split mode loads is a property of the build, not of llama.cpp in general: the pinned CUDA
build has no split buffer type any more, so `--split-mode row` stops at load with "device CUDA0 does
not support split buffers"; a CPU-only build refuses `--split-mode tensor` ("LLAMA_SPLIT_MODE_TENSOR
needs >= 1 devices"); an architecture without tensor parallelism refuses it by name; an older or other
build may load both. So specd does not keep a table: before a switch to a profile with row or tensor
split it starts the profile's binary on the profile's model with that split mode and no layers on the
GPUs (`-ngl 0`, a 256-token context, no warm-up), reads its log until the model's buffers are laid out
(loads) or it exits (refused: its own words are the reason), and stops it. No weights go to a GPU; each
GPU the process sees gets a CUDA context for a second or two. A probe that cannot tell (a timeout, no
free port) refuses nothing.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from specd.gpu.settings import SplitMode

PROBE_TIMEOUT_S = 90.0
# a line that shows the model's tensors were given buffers with this split mode (or got further)
_LOADED = re.compile(r"load_tensors: .*buffer size|llama_context: constructing|model loaded|listening on")
_ERROR_LINE = re.compile(r"^(?:\S+ )?E (?:\S+ +)?(.+)$")
_ABOUT_SPLITTING = re.compile(r"split|tensor parallel", re.IGNORECASE)
_NOT_THE_REASON = re.compile(r"failed to load model|exiting due to model loading error|cleaning up before exit"
                             r"|encountered an error while trying to fit")


@dataclass(frozen=True)
class SplitProbe:
    mode: SplitMode
    verdict: Literal["loads", "refused", "unknown"]
    said: str            # the binary's reason for a refusal; why the probe could not tell; "" when it loads

    def describe(self) -> str:
        if self.verdict == "loads":
            return f"--split-mode {self.mode}: the binary loads the model with it"
        if self.verdict == "refused":
            return f"--split-mode {self.mode}: this llama-server cannot load the model with it: {self.said}"
        return f"--split-mode {self.mode}: not probed ({self.said})"


def loaded(line: str) -> bool:
    return bool(_LOADED.search(line))


def refusal(lines: Sequence[str]) -> str:
    """The binary's reason, from the log of a load that failed: its "error loading model: ..." line,
    else its first error-level line that is not a generic "failed to load", else its last line."""
    for line in lines:
        if "error loading model:" in line:
            return line.split("error loading model:", 1)[1].strip()
    for line in lines:
        found = _ERROR_LINE.match(line.strip())
        if found and not _NOT_THE_REASON.search(line):
            return found.group(1).strip()
    text = [line.strip() for line in lines if line.strip()]
    return text[-1] if text else "it exited without a word"


def read_probe(mode: SplitMode, lines: Iterable[str], exit_code: int | None) -> SplitProbe:
    """The verdict of a probe's log (`exit_code` None: the process was stopped by the probe). A failed
    load counts as a refusal only where the binary's reason is about the split (a probe that found
    no free memory for its CUDA context, say, refuses nothing)."""
    seen = list(lines)
    if any(loaded(line) for line in seen):
        return SplitProbe(mode, "loads", "")
    if exit_code is not None and exit_code != 0:
        reason = refusal(seen)
        if _ABOUT_SPLITTING.search(reason):
            return SplitProbe(mode, "refused", reason)
        return SplitProbe(mode, "unknown", f"the probe failed for another reason: {reason}")
    return SplitProbe(mode, "unknown", "the server neither loaded the model nor exited in time")


def probe_argv(binary: Path, model: Path, mode: SplitMode, port: int, *, device_args: Sequence[str] = (),
               verbose_flag: str | None = "-lv", fit_flag: str | None = "-fit") -> list[str]:
    """The probe's command line: the profile's binary, model and device choice, nothing on the GPUs."""
    argv = [str(binary), "-m", str(model), "-sm", mode, "-ngl", "0", "-c", "256", "--host", "127.0.0.1",
            "--port", str(port), "--no-warmup", *device_args]
    if verbose_flag:
        argv += [verbose_flag, "4"]          # llama.cpp's model-loading lines are below the default level
    if fit_flag:
        argv += [fit_flag, "off"]            # skip the memory-fit dry run: the real load says the same
    return argv


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_probe(argv: Sequence[str], mode: SplitMode, env: Mapping[str, str] | None = None,
              timeout_s: float = PROBE_TIMEOUT_S) -> SplitProbe:
    """Start the probe, read its log until it shows the verdict, stop it."""
    try:
        process = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   errors="replace", env={**os.environ, **(env or {})}, start_new_session=True)
    except OSError as exc:
        return SplitProbe(mode, "unknown", f"{argv[0]} did not start: {exc.strerror}")
    timer = threading.Timer(timeout_s, lambda: _stop(process))
    timer.start()
    lines: list[str] = []
    code: int | None = None
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if loaded(line):
                break
        else:                                # its output ended: it exited (or is exiting)
            try:
                code = process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                code = None
    finally:
        timer.cancel()
        if process.poll() is None:
            _stop(process)
        if process.stdout is not None:
            process.stdout.close()
    return read_probe(mode, lines, code if code is not None and code >= 0 else None)


def _stop(process: subprocess.Popen[str]) -> None:
    """Stop the probe's process group (llama-server and anything it started)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _identity(path: Path) -> tuple[str, int, int]:
    try:
        stat = path.stat()
    except OSError:
        return str(path), -1, -1
    return str(path), stat.st_size, stat.st_mtime_ns


@lru_cache(maxsize=32)
def _cached_probe(binary: tuple[str, int, int], model: tuple[str, int, int], mode: SplitMode,
                  device_args: tuple[str, ...], env: tuple[tuple[str, str], ...], verbose_flag: str | None,
                  fit_flag: str | None) -> SplitProbe:
    try:
        port = _free_port()
    except OSError as exc:
        return SplitProbe(mode, "unknown", f"no free local port: {exc.strerror}")
    argv = probe_argv(Path(binary[0]), Path(model[0]), mode, port, device_args=device_args,
                      verbose_flag=verbose_flag, fit_flag=fit_flag)
    return run_probe(argv, mode, dict(env))


def probe_split_mode(binary: Path, model: Path, mode: SplitMode, *, device_args: Sequence[str] = (),
                     env: Mapping[str, str] | None = None, verbose_flag: str | None = "-lv",
                     fit_flag: str | None = "-fit") -> SplitProbe:
    """Does `binary` load `model` with `--split-mode mode`? Asked once per binary and model version
    (and devices, environment) in a process."""
    return _cached_probe(_identity(binary), _identity(model), mode, tuple(device_args),
                         tuple(sorted((env or {}).items())), verbose_flag, fit_flag)


@lru_cache(maxsize=16)
def _links_nccl(identity: tuple[str, int, int]) -> bool:
    """Does the file name NCCL's entry point (a dynamic import or NCCL linked in)? Unreadable: True."""
    wanted = b"ncclCommInitAll"
    try:
        with open(identity[0], "rb") as handle:
            tail = b""
            while chunk := handle.read(1 << 22):
                if wanted in tail + chunk:
                    return True
                tail = chunk[-len(wanted):]
    except OSError:
        return True
    return False


def binary_has_nccl(binary: Path) -> bool:
    """Does this llama-server bring NCCL along (tensor split's AllReduce then costs NCCL's buffers)?
    Read from the binary's bytes; one that cannot be read counts as having it (the larger estimate)."""
    return _links_nccl(_identity(binary))
