"""Tune inside a profile: `specd tune --sweep draft_n_max=2..8 --sweep draft_p_min=0.5,0.75,0.9`.

A sweep derives variants of one profile (every combination of the values given, each key one of
the profile's [speculative] keys, each value checked as the profile's own file would be), writes
each as a temporary profile file beside it (`<base>.sweep.<key>-<value>...`: the switch, the
shadow slot and the health gate load profiles by name), and hands base and variants to the tuner:
the same bench (interleaved rounds, CIs, early stop, the time budget), the same decision (margin,
separated CIs, the fidelity gate) and the same speculation check. A winning variant becomes a real
profile file, `<base>-<key>-<value>...toml`: the base's file copied with tomlkit, its comments kept,
the swept keys set; the base itself is never edited. The temporary files are removed on the way
out (Ctrl-C included) and before a new sweep of the same base.

Parsing, deriving and writing are pure over text (unit-tested in milliseconds); `sweep_deployment`
is the side-effecting part.
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.items import Table

from specd.deploy.seams import SeamsFactory
from specd.durable import atomic_write
from specd.errors import SpecdError, UsageError
from specd.profiles.axes import SWEEPABLE, Axis, Value
from specd.profiles.config import Config, Deployment
from specd.profiles.flags import binary_flags
from specd.profiles.keys import NAME_PATTERN
from specd.profiles.load import Profile, load_profile
from specd.tune.targets import DeploymentTarget, Target
from specd.tune.tuner import TuneResult, tune_deployment
from specd.tune.verify import carry_verification

MAX_VARIANTS = 32
SWEEP_MARK = ".sweep."


@dataclass(frozen=True)
class Variant:
    base: str
    settings: tuple[tuple[str, Value | bool], ...]  # (key, value) in the order of the axes; True: a switch on

    @property
    def label(self) -> str:
        return ".".join(key if value is True else f"{key}-{value:g}" for key, value in self.settings)

    @property
    def name(self) -> str:
        """The temporary profile's name: readable when it fits a profile name, else a checksum."""
        name = f"{self.base}{SWEEP_MARK}{self.label}"
        if re.fullmatch(NAME_PATTERN, name):
            return name
        return f"{self.base[:40]}{SWEEP_MARK}{zlib.crc32(self.label.encode()):08x}"

    def describe(self) -> str:
        return ", ".join(f"{key} = true" if value is True else f"{key} = {value:g}" for key, value in self.settings)


AUTOTUNE_FLAG = "--spec-autotune"


def engine_autotune(base: str, offers_autotune: bool, base_autotunes: bool) -> Variant | None:
    """The "engine autotune" candidate (issue: use the engine's own tuner where it exists): the base with
    `autotune = true`, when its binary offers --spec-autotune and the base does not already turn it on."""
    if not offers_autotune or base_autotunes:
        return None
    return Variant(base, (("autotune", True),))


def derive(base: str, axes: Sequence[Axis], base_settings: Mapping[str, Any]) -> list[Variant]:
    """Every combination of the axes' values, except the base's own settings (the base is benched as itself)."""
    keys = [axis.key for axis in axes]
    if len(set(keys)) != len(keys):
        raise UsageError(f"--sweep names a key twice: {', '.join(keys)}")
    combos = itertools.product(*(axis.values for axis in axes))
    variants = [Variant(base, tuple(zip(keys, combo, strict=True))) for combo in combos]
    variants = [v for v in variants if any(base_settings.get(k) != value for k, value in v.settings)]
    if not variants:
        raise UsageError(f"--sweep: every combination is {base}'s own setting; nothing to compare")
    if len(variants) > MAX_VARIANTS:
        raise UsageError(f"--sweep: {len(variants)} variants of {base}; at most {MAX_VARIANTS} are benched in one run",
                         hint="sweep fewer values, or one key at a time")
    return variants


def variant_text(base_text: str, variant: Variant, description: str) -> str:
    """The base's file with the variant's [speculative] keys set and a new description; comments kept."""
    document = tomlkit.parse(base_text)
    document["description"] = description
    table = document.get("speculative")
    if not isinstance(table, Table):
        table = tomlkit.table()
        document["speculative"] = table
    for key, value in variant.settings:
        table[key] = value
    return tomlkit.dumps(document)


def winner_name(profiles_dir: Path, variant: Variant) -> str:
    """A name for the winning variant's profile that no file in the directory has yet."""
    stem = f"{variant.base}-{variant.label}"
    stem = stem if re.fullmatch(NAME_PATTERN, stem) else f"{variant.base[:40]}-{zlib.crc32(variant.label.encode()):08x}"
    name, number = stem, 1
    while (profiles_dir / f"{name}.toml").exists():
        number += 1
        name = f"{stem[:60]}-{number}"
    return name


def remove_stale(profiles_dir: Path, base: str) -> list[Path]:
    """Temporary variant files a killed sweep of `base` left behind."""
    stale = sorted(profiles_dir.glob(f"{base}{SWEEP_MARK}*.toml"))
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


# -- on a deployment: temporary files, the tuner, the winner's file ------------------------------------------


@dataclass
class SweepResult:
    tune: TuneResult
    base: str
    variants: list[Variant]
    written: Path | None = None  # the winner's new profile file, when a variant won and was switched to
    would_write: str | None = None  # with --dry-run: the variant that would have been written


def sweep_deployment(config: Config, deployment: Deployment, axes: Sequence[Axis], *, seams: SeamsFactory,
                     base: str | None = None, target: Target | None = None, dry_run: bool = False,
                     **tune_options: Any) -> SweepResult:
    """Derive the variants of `base` (default: the active profile), bench them against it with the tuner,
    write the winner as a profile file and end on it; the temporary variant files never outlive the call."""
    if base is None:
        probe = target or DeploymentTarget(deployment, seams=seams)
        base = probe.active()
        if target is None and isinstance(probe, DeploymentTarget):
            probe.close()
        if base is None:
            raise UsageError("--sweep: no profile is active to sweep", hint="name the base: --profile NAME")
    profile = load_profile(deployment.profiles_dir, base)
    if profile.speculative.type == "none":
        raise UsageError(f"--sweep: {base} does not speculate (type = \"none\"): its draft settings do nothing",
                         hint="sweep a speculative profile: --profile NAME")
    base_text = profile.path.read_text()
    variants = derive(base, axes, {key: getattr(profile.speculative, key) for key in SWEEPABLE})
    autotune = engine_autotune(base, _offers_autotune(profile), profile.speculative.autotune)
    if autotune is not None:
        variants.append(autotune)
    by_name = {v.name: v for v in variants}
    sweep_facts: dict[str, Any] = {"base": base, "axes": {a.key: list(a.values) for a in axes},
                                   "variants": len(variants)}
    written: list[Path] = []

    def write_winner(best: str) -> str:
        variant = by_name.get(best)
        if variant is None:
            return best  # the base (or another profile) won: nothing to write
        name = winner_name(deployment.profiles_dir, variant)
        path = deployment.profiles_dir / f"{name}.toml"
        text = variant_text(base_text, variant, f"{base} with {variant.describe()} (specd tune --sweep)")
        atomic_write(path, text.encode("utf-8"))  # 0600 when the base profile holds a key
        written.append(path)
        sweep_facts["verification_carried"] = carry_verification(deployment, variant.name, name)
        sweep_facts["written"] = str(path)  # read by the history record, which is made after the switch
        return name

    remove_stale(deployment.profiles_dir, base)
    try:
        for variant in variants:
            text = variant_text(base_text, variant, f"sweep of {base}: {variant.describe()} (temporary)")
            atomic_write(deployment.profiles_dir / f"{variant.name}.toml", text.encode("utf-8"))
        extra = {**(tune_options.pop("extra", None) or {}), "sweep": sweep_facts}
        tuned = tune_deployment(config, deployment, seams=seams, candidates=[base, *by_name], target=target,
                                dry_run=dry_run, on_winner=write_winner, extra=extra, **tune_options)
    finally:
        remove_stale(deployment.profiles_dir, base)
    best = tuned.decision.best
    would = (winner_name(deployment.profiles_dir, by_name[best])
             if dry_run and best in by_name and tuned.decision.reason.startswith("would switch") else None)
    return SweepResult(tuned, base, variants, written[0] if written else None, would)


def _offers_autotune(profile: Profile) -> bool:
    """Whether the base's binary lists --spec-autotune in its --help (one that cannot say: no)."""
    try:
        return binary_flags(profile.binary, profile.launcher).has(AUTOTUNE_FLAG)
    except SpecdError:
        return False


def sweep_sentence(swept: SweepResult) -> str:
    """What the sweep left behind, in one line: the file written (its path), or why none was."""
    count = f"{len(swept.variants)} variants of {swept.base}"
    if swept.written is not None:
        return f"sweep ({count}): the winner is now a profile file: {swept.written}"
    if swept.would_write is not None:
        return f"sweep ({count}): dry run; would write {swept.would_write}.toml and switch to it"
    return f"sweep ({count}): no variant won; nothing written, {swept.base} is unchanged"


def sweep_json(swept: SweepResult) -> dict[str, Any]:
    return {"base": swept.base, "variants": {v.name: dict(v.settings) for v in swept.variants},
            "written": str(swept.written) if swept.written else None, "would_write": swept.would_write}
