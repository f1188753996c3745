"""Files that must survive a crash or a power loss, and the named fault points crash tests stop at.

Writes go temp file in the same directory -> fsync -> rename -> fsync the directory, so after a
crash the target is the old or the new content in full, never a mix or an empty file. The lowest
layer: the unit, its backups, the intent record and imported profiles are all written this way.
A file keeps the mode it had (a new one gets 0644, or the mode asked for), and one whose content
holds a key (specd.secrets) is written without the group and other bits, whatever was asked.

`SPECD_FAULT=step1,step2` makes specd kill itself with SIGKILL when it reaches one of those
steps (`checkpoint`) — a power cut or `kill -9` at that exact moment. `step:INT` or `step:TERM`
sends that signal instead: Ctrl-C, or a `systemctl stop`/`kill` of the CLI, at that exact moment
(the process handles it as it would from outside). Unset in normal use.
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import stat
from pathlib import Path

from specd.errors import PreflightError, SpecdError
from specd.secrets import private_mode

TMP_INFIX = ".specd-tmp-"
BACKUP_INFIX = ".pre-"


_FAULT_SIGNALS = {"": signal.SIGKILL, "KILL": signal.SIGKILL, "INT": signal.SIGINT, "TERM": signal.SIGTERM}


def checkpoint(step: str) -> None:
    faults = os.environ.get("SPECD_FAULT", "")
    for fault in faults.split(",") if faults else ():
        name, _, how = fault.partition(":")
        if name == step and how in _FAULT_SIGNALS:
            os.kill(os.getpid(), _FAULT_SIGNALS[how])


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def mode_of(path: Path, default: int = 0o644) -> int:
    """The permission bits of `path` (`default` when it does not exist)."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return default


def atomic_write(path: Path, data: bytes, *, mode: int | None = None, fault_name: str = "file") -> None:
    """Replace `path` with `data` atomically and durably; the old file stays whole on any error.

    `mode`: the new file's permissions (default: what `path` has now, else 0644); never readable
    by others when `data` holds a key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}{TMP_INFIX}{os.getpid()}")
    wanted = private_mode(mode_of(path) if mode is None else mode, data)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, wanted)
        try:
            os.fchmod(fd, wanted & stat.S_IMODE(os.fstat(fd).st_mode))  # a leftover temp file kept its mode
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            checkpoint(f"{fault_name}-before-fsync")
            os.fsync(fd)
        finally:
            os.close(fd)
        checkpoint(f"{fault_name}-before-rename")
        os.replace(tmp, path)
        checkpoint(f"{fault_name}-before-dirsync")
        fsync_dir(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            raise PreflightError(f"{path.parent}: no space left on the device; nothing was changed") from exc
        raise SpecdError(f"cannot write {path}: {exc.strerror}; the previous file is unchanged") from exc


def remove_stale_temp_files(path: Path) -> list[Path]:
    """Temp files a crash left beside `path` or beside one of its `.pre-*` backups (never the
    target itself, which is always whole)."""
    stale = [*path.parent.glob(f".{path.name}{TMP_INFIX}*"),
             *path.parent.glob(f".{path.name}{BACKUP_INFIX}*{TMP_INFIX}*")]
    for leftover in stale:
        leftover.unlink(missing_ok=True)
    return stale


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
