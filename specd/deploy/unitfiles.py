"""The unit's `.pre-*` backups and the content store of every unit text specd installed, written
durably (`specd.durable`, re-exported here for the deploy layer)."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from specd.durable import (
    BACKUP_INFIX,
    TMP_INFIX,
    atomic_write,
    fsync_dir,
    mode_of,
    read_text,
    remove_stale_temp_files,
    sha256_text,
)

__all__ = ["BACKUP_INFIX", "TMP_INFIX", "Backup", "ContentStore", "atomic_write", "backup_name", "disk_free",
           "fsync_dir", "list_backups", "mode_of", "prune_backups", "read_text", "remove_stale_temp_files",
           "sha256_text", "write_backup"]
_BACKUP_RE = re.compile(r"\.pre-(\d{8}T\d{6}(?:\.\d+)?Z)-(.+)$")


@dataclass(frozen=True)
class Backup:
    path: Path
    stamp: str
    profile: str


def backup_name(unit_path: Path, profile: str | None, now: datetime | None = None) -> Path:
    moment = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S.%fZ")
    return unit_path.with_name(f"{unit_path.name}{BACKUP_INFIX}{moment}-{profile or 'unmanaged'}")


def write_backup(unit_path: Path, text: str, profile: str | None, target: Path | None = None) -> Path:
    """Copy the current unit beside itself (at `target`, default a new name), with the unit file's own
    mode (0600 when it holds a key); refused (nothing touched) when the disk is full."""
    target = target or backup_name(unit_path, profile)
    atomic_write(target, text.encode("utf-8"), mode=mode_of(unit_path), fault_name="backup")
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
