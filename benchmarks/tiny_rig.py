"""The tiny example profiles in a scratch directory, on a free port: what a benchmark switches between.

    from tiny_rig import tiny_profiles     (benchmarks/ is first on sys.path for `python benchmarks/X.py`)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import tomlkit

from specd.setup.sandbox import free_port

REPO = Path(__file__).resolve().parent.parent


def tiny_profiles(root: Path, *, stability_s: float = 1) -> Path:
    """A copy of profiles/tiny under `root` whose base listens on a free port; returns its directory."""
    profiles = root / "profiles"
    shutil.copytree(REPO / "profiles" / "tiny", profiles)
    base = tomlkit.parse((profiles / "base.toml").read_text())
    base["port"] = free_port()
    base["stability_s"] = stability_s
    (profiles / "base.toml").write_text(tomlkit.dumps(base))
    return profiles
