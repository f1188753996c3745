"""What a llama-server binary accepts, read from its own `--help`, cached by the binary's sha256.

Forks and versions differ (vanilla llama.cpp spells MTP `draft-mtp`, May-2026 builds `mtp`, the
BeeLlama fork `dflash`), so specd never assumes a flag: it asks the binary.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from specd import paths
from specd.errors import PreflightError

SPEC_TYPE_SPELLINGS: dict[str, tuple[str, ...]] = {
    "draft": ("draft-simple", "draft"),
    "mtp": ("draft-mtp", "mtp"),
    "dflash": ("draft-dflash", "dflash"),
    "eagle3": ("draft-eagle3", "eagle3"),
    "dspark": ("draft-dspark", "dspark"),
}
_OPTION_LINE = re.compile(r"^-")
_SPLIT = re.compile(r"[,\s]+")
CACHE_FORMAT = 1


@dataclass(frozen=True)
class BinaryFlags:
    """The option groups of one binary: each group is the set of spellings of one option."""

    binary: str
    groups: tuple[tuple[str, ...], ...]
    spec_types: tuple[str, ...]

    def has(self, flag: str) -> bool:
        return any(flag in group for group in self.groups)

    def canonical(self, flag: str) -> str:
        name = flag.split("=", 1)[0]
        for group in self.groups:
            if name in group:
                return group[0]
        return name

    def spec_type_spelling(self, specd_type: str, *, profile_name: str) -> str:
        if not self.has("--spec-type"):
            raise PreflightError(
                f"profile '{profile_name}': {self.binary} has no --spec-type option; "
                "it is too old for speculative decoding by type"
            )
        for spelling in SPEC_TYPE_SPELLINGS.get(specd_type, (specd_type,)):
            if spelling in self.spec_types:
                return spelling
        offered = ", ".join(t for t in self.spec_types if t != "none") or "nothing"
        raise PreflightError(
            f"profile '{profile_name}': speculative type '{specd_type}' is not offered by {self.binary}; "
            f"its --spec-type accepts {offered}"
        )


def parse_help(binary: str, text: str) -> BinaryFlags:
    """Option lines start at column 0 with comma-separated names, then an argument placeholder."""
    groups: list[tuple[str, ...]] = []
    spec_types: tuple[str, ...] = ()
    for line in text.splitlines():
        if not _OPTION_LINE.match(line):
            continue
        names: list[str] = []
        placeholder = ""
        for token in _SPLIT.split(line.strip()):
            if token.startswith("-") and len(token) > 1 and not token[1:2].isdigit():
                names.append(token)
                continue
            placeholder = token
            break
        if not names:
            continue
        groups.append(tuple(names))
        if "--spec-type" in names:
            remainder = line.split("--spec-type", 1)[1].strip().split()
            placeholder = remainder[0] if remainder else placeholder
            spec_types = tuple(v for v in re.split(r"[,|]", placeholder.strip("[]<>{}")) if v)
    if not groups:
        raise PreflightError(f"{binary}: --help printed no options; is this a llama-server binary?")
    return BinaryFlags(binary=binary, groups=tuple(groups), spec_types=spec_types)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_executable(binary: Path) -> None:
    if not binary.is_file():
        raise PreflightError(f"{binary}: no such binary")
    if not os.access(binary, os.X_OK):
        raise PreflightError(f"{binary}: not executable", hint=f"chmod +x {binary}")


def binary_flags(binary: Path) -> BinaryFlags:
    """Parse `binary --help`, from the cache when this exact binary was seen before."""
    check_executable(binary)
    digest = _sha256(binary)
    cache_file = paths.cache_dir() / "flags" / f"{digest}.json"
    try:
        cached = json.loads(cache_file.read_text())
        if cached.get("format") == CACHE_FORMAT:
            return BinaryFlags(str(binary), tuple(tuple(g) for g in cached["groups"]), tuple(cached["spec_types"]))
    except (OSError, ValueError, KeyError):
        pass
    try:
        result = subprocess.run(
            [str(binary), "--help"], capture_output=True, text=True, timeout=60, check=False,
            env={**os.environ, "LLAMA_LOG_COLORS": "off"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PreflightError(f"{binary} --help failed: {exc}") from exc
    flags = parse_help(str(binary), result.stdout + result.stderr)
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache_file.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"format": CACHE_FORMAT, "groups": flags.groups, "spec_types": flags.spec_types}))
    os.replace(tmp, cache_file)
    return flags
