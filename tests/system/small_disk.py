"""A small real tmpfs for full-disk tests, without root.

`unshare --user --map-root-user --mount` gives an unprivileged process a mount namespace of its
own, where it may mount a tmpfs. A holder process keeps that namespace alive; everyone else (the
test, specd, the private systemd manager) reaches the tmpfs through `/proc/<holder>/root/...`,
a path into the holder's view of the file system. Writes there land on the tmpfs and fail with a
real ENOSPC; statvfs reports the tmpfs's size. When the holder exits, the tmpfs goes with it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_tmpfs(mountpoint: Path, size: str) -> Iterator[Path]:
    """Mount a `size` tmpfs at `mountpoint` in a private namespace; yield the path that reaches it."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    script = f'mount -t tmpfs -o size={size},mode=0755 tmpfs "$1" && echo mounted && exec sleep 3600'
    with subprocess.Popen(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh",
                           str(mountpoint)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout is not None and holder.stderr is not None
            if holder.stdout.readline().strip() != "mounted":
                holder.wait(timeout=10)
                pytest.fail(f"could not mount a tmpfs in a user+mount namespace (unshare, util-linux): "
                            f"{holder.stderr.read().strip()}")
            yield Path(f"/proc/{holder.pid}/root") / mountpoint.relative_to("/")
        finally:
            holder.kill()
            holder.wait(timeout=10)
