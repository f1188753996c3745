"""Every real unit in tests/corpus/units is imported and rendered back; the result is one of:

- round-trip: the rendered llama-server argv equals the original's as systemd itself parses it
  (the ExecStart property of the unit loaded into the private manager, variables expanded from
  the unit's own Environment=), compared as a multiset of flag/value pairs with short and long
  spellings equal (from the real binary's --help). The defaults import fills in and says so
  (--host 127.0.0.1, --port 8080, --alias <model file name>) are llama-server's own behaviour and
  are not counted as a difference;
- refused: a SpecdError whose message names the cause (a wrapper script, a container, a missing
  EnvironmentFile, router mode, a Hub model, a relative binary ...);
- silently wrong (a failure): imported and rendered, but the command differs.

With SPECD_WRITE_RESULTS=1 the per-file table goes to benchmarks/results/import-corpus.{json,md}.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from specd.deploy.systemd import connect_systemd
from specd.errors import SpecdError
from specd.profiles.flags import BinaryFlags, binary_flags
from specd.profiles.load import load_profile
from specd.unit.importer import import_unit_report
from specd.unit.render import build_argv
from specd.unit.syntax import expand_variables, parse_assignments
from tests.conftest import LLAMA_SERVER, REPO, Box

CORPUS = sorted((REPO / "tests" / "corpus" / "units").glob("*.service"))
DEFAULTS = {("--host", "127.0.0.1"), ("--port", "8080")}


def pairs(argv: list[str], flags: BinaryFlags) -> Counter[tuple[str, str | None]]:
    """Flag/value pairs with every spelling made canonical (-c and --ctx-size are one flag)."""
    counted: Counter[tuple[str, str | None]] = Counter()
    index = 0
    while index < len(argv):
        word = argv[index]
        if word.startswith("-") and not word.lstrip("-").replace(".", "").isdigit():
            name, equals, inline = word.partition("=")
            canonical = flags.canonical(name) if flags.has(name) else name
            if equals and name.startswith("--"):
                counted[(canonical, inline)] += 1
                index += 1
                continue
            following = argv[index + 1] if index + 1 < len(argv) else None
            if following is not None and (not following.startswith("-") or following.lstrip("-").isdigit()):
                counted[(canonical, following)] += 1
                index += 2
                continue
            counted[(canonical, None)] += 1
        else:
            counted[("(positional)", word)] += 1
        index += 1
    return counted


def systemd_argv(box: Box, source: Path, number: int) -> list[str]:
    """What systemd itself runs for this unit: its ExecStart property, $VARs from Environment=."""
    name = f"corpus-{os.getpid()}-{number}.service"
    box.manager.unit_dir.mkdir(parents=True, exist_ok=True)
    target = box.manager.unit_dir / name
    shutil.copyfile(source, target)
    try:
        subprocess.run(["systemctl", "--user", "daemon-reload"], env=box.env, check=True, timeout=60)
        client = connect_systemd("user")
        [argv] = client.exec_start_argv(name)[:1] or [[]]
        shown = subprocess.run(["systemctl", "--user", "show", "-p", "Environment", "--value", name], env=box.env,
                               capture_output=True, text=True, check=True).stdout.strip()
    finally:
        target.unlink(missing_ok=True)
    environment = parse_assignments(shown, name) if shown else {}
    return expand_variables(list(argv), environment)


def test_every_corpus_unit_round_trips_or_is_refused_by_name(box: Box, tmp_path: Path) -> None:
    assert len(CORPUS) >= 25, "the corpus needs at least 25 real units"
    flags = binary_flags(LLAMA_SERVER)
    outcomes: list[dict[str, str]] = []
    for number, source in enumerate(CORPUS):
        profiles = tmp_path / f"profiles-{number}"
        profiles.mkdir()
        outcome = {"file": source.name}
        try:
            import_unit_report(source, profiles, "imported", unit_name="llama-server.service")
            profile = load_profile(profiles, "imported")
            profile_binary = profile.binary
            rendered = build_argv(dataclasses.replace(profile, binary=LLAMA_SERVER), flags)
        except SpecdError as refusal:
            outcome.update(outcome="refused", detail=str(refusal).splitlines()[0])
            outcomes.append(outcome)
            continue
        original = systemd_argv(box, source, number)
        inner = list(rendered[1:])
        want = pairs([a for a in original if a != original[0]] if original else [], flags)
        got = pairs(inner, flags)
        extra = got - want
        for default in list(extra):
            is_default = default in {(flags.canonical(f), v) for f, v in DEFAULTS} or (
                default[0] == flags.canonical("--alias") and default[1] == profile.alias)
            if is_default and not any(key[0] == default[0] for key in want):
                del extra[default]
        missing = want - got
        same_binary = str(profile_binary) == original[0] or Path(original[0]).name != "bash"
        if not extra and not missing and same_binary:
            outcome.update(outcome="round-trip", detail=f"{len(inner)} args")
        else:
            outcome.update(outcome="silently wrong", detail=f"missing {dict(missing)} extra {dict(extra)}")
        outcomes.append(outcome)
    wrong = [o for o in outcomes if o["outcome"] == "silently wrong"]
    round_trips = sum(o["outcome"] == "round-trip" for o in outcomes)
    if os.environ.get("SPECD_WRITE_RESULTS"):
        write_results(outcomes, round_trips)
    assert not wrong, json.dumps(wrong, indent=1)
    for refused in (o for o in outcomes if o["outcome"] == "refused"):
        assert "Traceback" not in refused["detail"] and len(refused["detail"]) > 20, refused
    assert round_trips >= len(CORPUS) // 2, outcomes


def write_results(outcomes: list[dict[str, str]], round_trips: int) -> None:
    results = REPO / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    header = {
        "command": "SPECD_WRITE_RESULTS=1 .venv/bin/python -m pytest tests/system/test_corpus.py",
        "machine": f"{platform.node()} {os.cpu_count()} cores, Python {sys.version.split()[0]}",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "truth": "systemd's own parse of each original unit (ExecStart property in a private systemd --user)",
        "units": len(outcomes), "round_trip": round_trips,
        "refused": sum(o["outcome"] == "refused" for o in outcomes),
        "silently_wrong": sum(o["outcome"] == "silently wrong" for o in outcomes),
    }
    (results / "import-corpus.json").write_text(json.dumps({**header, "files": outcomes}, indent=1) + "\n")
    lines = [f"# Import corpus: {round_trips} of {len(outcomes)} real units round-trip", "",
             *(f"- {key}: {value}" for key, value in header.items()), "",
             "| file | outcome | detail |", "|---|---|---|",
             *(f"| {o['file']} | {o['outcome']} | {o['detail'].replace('|', '/')} |" for o in outcomes)]
    (results / "import-corpus.md").write_text("\n".join(lines) + "\n")
