"""The private manager's runtime directory: systemd exits with status 1 and no message when a socket
path is longer than AF_UNIX allows, so a deep base directory — and a deep $TMPDIR, as pytest-xdist's
workers have — must still give it one whose sockets fit (found when the quickstart tests ran under xdist)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from specd.setup.sandbox import runtime_dir


def test_a_shallow_base_keeps_its_runtime_dir_inside_it(tmp_path: Path) -> None:
    base = Path(tempfile.mkdtemp(prefix="b-", dir="/tmp"))
    try:
        assert runtime_dir(base) == base / "runtime"
    finally:
        base.rmdir()


def test_a_deep_base_and_a_deep_tmpdir_fall_back_to_tmp_where_the_sockets_fit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deep_tmp = tmp_path / ("t" * 50) / ("u" * 50)
    deep_tmp.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep_tmp))  # what $TMPDIR sets
    runtime = runtime_dir(tmp_path / ("b" * 80))
    try:
        assert runtime.parent == Path("/tmp") and runtime.is_dir()
        assert len(str(runtime / "systemd" / "inaccessible" / "private")) < 108
        assert list(deep_tmp.iterdir()) == []  # the too-deep candidate was removed
    finally:
        runtime.rmdir()
