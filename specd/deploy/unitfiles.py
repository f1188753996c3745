"""Files that must survive a crash or a power loss: the unit, its `.pre-*` backups, the intent.

Writes go temp file in the same directory -> fsync -> rename -> fsync the directory, so after a
crash the target is the old or the new content in full, never a mix or an empty file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from specd.deploy.faults import checkpoint
from specd.errors import PreflightError, SpecdError

BACKUP_INFIX = ".pre-"
TMP_INFIX = ".specd-tmp-"
_BACKUP_RE = re.compile(r"\.pre-(\d{8}T\d{6}(?:\.\d+)?Z)-(.+)$")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, mode: int = 0o644, fault_name: str = "file") -> None:
    """Replace `path` with `data` atomically and durably; the old file stays whole on any error."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}{TMP_INFIX}{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
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
    stale = [*path.parent.glob(f".{path.name}{TMP_INFIX}*"), *path.parent.glob(f".{path.name}{BACKUP_INFIX}*{TMP_INFIX}*")]
    for leftover in stale:
        leftover.unlink(missing_ok=True)
    return stale


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class Backup:
    path: Path
    stamp: str
    profile: str


def backup_name(unit_path: Path, profile: str | None, now: datetime | None = None) -> Path:
    moment = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S.%fZ")
    return unit_path.with_name(f"{unit_path.name}{BACKUP_INFIX}{moment}-{profile or 'unmanaged'}")


def write_backup(unit_path: Path, text: str, profile: str | None) -> Path:
    """Copy the current unit beside itself; refused (nothing touched) when the disk is full."""
    target = backup_name(unit_path, profile)
    atomic_write(target, text.encode("utf-8"))
    return target


def list_backups(unit_path: Path) -> list[Backup]:
    """Newest first."""
    found: list[Backup] = []
    for candidate in unit_path.parent.glob(f"{unit_path.name}{BACKUP_INFIX}*"):
        match = _BACKUP_RE.search(candidate.name)
        if match and candidate.name.startswith(unit_path.name + BACKUP_INFIX):
            found.append(Backup(candidate, match.group(1), match.group(2)))
    return sorted(found, key=lambda b: b.stamp, reverse=True)


def prune_backups(unit_path: Path, keep: int, protect: set[Path] | None = None) -> list[Path]:
    removed: list[Path] = []
    for backup in list_backups(unit_path)[keep:]:
        if protect and backup.path in protect:
            continue
        backup.path.unlink(missing_ok=True)
        removed.append(backup.path)
    return removed


class ContentStore:
    """Every unit text specd ever installed, by sha256, so `rollback --to GEN` can find it."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def put(self, text: str) -> str:
        digest = sha256_text(text)
        target = self.root / f"{digest}.service"
        if not target.exists():
            atomic_write(target, text.encode("utf-8"), mode=0o600)
        return digest

    def get(self, digest: str) -> str | None:
        return read_text(self.root / f"{digest}.service")


def disk_free(path: Path) -> int:
    return shutil.disk_usage(path if path.exists() else path.parent).free
