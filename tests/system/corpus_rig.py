"""The rig of tests/system/test_corpus.py: corpus units installed in the private manager, imported
and rendered by `specd` (a subprocess, as a user runs it), and compared with what systemd runs.
Nothing here comes from specd but the render fallback (`render`), which calls specd's own render
with the reference llama-server's --help when `show` objects only that a unit's binary or model
file is not on this box."""

from __future__ import annotations

import itertools
import json
import os
import platform
import re
import subprocess
import sys
import tomllib
from collections import Counter
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from specd.setup.sandbox import PrivateSystemd
from tests.conftest import LLAMA_SERVER, REPO
from tests.system import systemd_truth as truth
from tests.system.server_argv import (
    Aliases,
    NotAServerCommand,
    ServerCommand,
    command_problems,
    compare_args,
    server_command,
)

CORPUS = REPO / "tests" / "corpus"
MANIFEST = tomllib.loads((CORPUS / "manifest.toml").read_text())
RESULTS = REPO / "benchmarks" / "results"
Outcome = Literal["round-trips", "refused", "refused-unclear", "accepted-then-refused", "silently-wrong",
                  "traceback"]
_SOURCE_ROW = re.compile(r"^\| `([^`]+)` \| \[([^\]]+)\]\([^)]*\) \| `([^`]+)` \| `([0-9a-f]{40})` \|", re.MULTILINE)
_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def corpus_files(folder: str) -> list[Path]:
    directory = CORPUS / folder
    return sorted(directory.iterdir()) if directory.is_dir() else []


@dataclass(frozen=True)
class Row:
    file: str
    source: str
    outcome: Outcome
    detail: str
    served: str = ""  # the id clients saw before -> the id the imported profile's gate asks for
    knowable: bool = True  # systemd starts it and a llama-server argv can be found in what it runs


@dataclass(frozen=True)
class Attempt:
    """One corpus unit on its way through import and render."""

    file: Path
    unit: str  # the name systemd knows it by
    import_from: str
    profile: str
    original: truth.Loaded


def sources() -> dict[str, str]:
    text = (CORPUS / "SOURCES.md").read_text()
    return {m.group(1): f"{m.group(2)}:{m.group(3)}@{m.group(4)[:12]}" for m in _SOURCE_ROW.finditer(text)}


def specd(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specd", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def crashed(result: subprocess.CompletedProcess[str]) -> bool:
    output = result.stdout + result.stderr
    return "Traceback (most recent call last)" in output or "internal error" in output


def deployment(tmp_path: Path, name: str) -> tuple[dict[str, str], Path]:
    profiles = tmp_path / name / "profiles"
    profiles.mkdir(parents=True)
    config = tmp_path / name / "specd.toml"
    config.write_text(f'unit = "specd-corpus-target.service"\nscope = "user"\nprofiles_dir = "{profiles}"\n')
    env = {**os.environ, "SPECD_CONFIG": str(config), "XDG_STATE_HOME": str(tmp_path / name / "state")}
    return env, profiles


def install_originals(manager: PrivateSystemd, files: list[Path]) -> list[tuple[Path, str, str]]:
    """(corpus file, unit name, what to pass to --from) for each corpus unit, installed in the manager
    (names carry this process's id: several helpers' private managers share cgroup paths)."""
    home = manager.env["HOME"]
    installed = []
    pid = os.getpid()
    for index, file in enumerate(files):
        meta = MANIFEST.get(file.name, {})
        for support in meta.get("support", []):
            target = Path(str(support["to"]).replace("%h", home))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((CORPUS / support["file"]).read_bytes())
        if file.name.endswith("@.service"):
            template = f"specd-corpus-{pid}-{index}@.service"
            truth.install(manager, template, file.read_bytes())
            unit = f"specd-corpus-{pid}-{index}@{meta['instance']}.service"
            installed.append((file, unit, unit))
        else:
            unit = f"specd-corpus-{pid}-{index}.service"
            path = truth.install(manager, unit, file.read_bytes())
            installed.append((file, unit, str(path)))
        if "environment_file" in meta:
            _point_at_environment_file(manager, unit, meta["environment_file"], Path(home))
    truth.daemon_reload(manager)
    return installed


def _point_at_environment_file(manager: PrivateSystemd, unit: str, entry: dict[str, Any], home: Path) -> None:
    """The repository's copy of an EnvironmentFile= that lives outside HOME, and a drop-in that points
    the unit at it (as `systemctl edit` would); the unit file stays verbatim. `filled_in` does what the
    repository's installer does to its template: `sed -i "s|NAME=.*|NAME=VALUE|"`, in order."""
    copy = home / "corpus-environment" / Path(entry["file"]).name
    copy.parent.mkdir(parents=True, exist_ok=True)
    text = (CORPUS / entry["file"]).read_text()
    for name, value in entry.get("filled_in", []):
        text = re.sub(rf"{re.escape(name)}=.*", lambda _, n=name, v=value: f"{n}={v}", text)
    copy.write_text(text)
    drop_in = manager.unit_dir / f"{unit}.d" / "10-corpus-environment.conf"
    drop_in.parent.mkdir(parents=True, exist_ok=True)
    drop_in.write_text(f"# {entry['replaces']} on the unit's own machine\n[Service]\nEnvironmentFile=\n"
                       f"EnvironmentFile={copy}\n")


def render(env: dict[str, str], profiles: Path, name: str, original_args: tuple[str, ...]) -> tuple[str | None, str]:
    """The unit text the profile renders to, or the refusal. `show` first; its render alone when the
    only objection is that the unit's binary or model file is not on this machine."""
    shown = specd(env, "show", name, "--json")
    if shown.returncode == 0:
        return str(json.loads(shown.stdout)["unit"]), ""
    message = (shown.stderr or shown.stdout).strip()
    if crashed(shown):
        raise Crash(message)
    if not re.search(r"no such binary|no such model file|not executable|cannot read|No such file or directory",
                     message):
        return None, message
    from specd.errors import SpecdError
    from specd.profiles.flags import binary_flags
    from specd.profiles.load import load_profile
    from specd.unit.render import build_argv, default_template_path, render_unit

    try:
        profile = load_profile(profiles, name)
        reference = binary_flags(LLAMA_SERVER)
        # The unit ran with its own binary, so that binary accepts every flag the unit passed.
        extra = tuple((arg.split("=", 1)[0],) for arg in original_args
                      if arg.startswith("-") and not reference.has(arg.split("=", 1)[0]))
        spec_types = [v.split(":", 1)[0] for flag, value in itertools.pairwise(original_args)
                      if flag == "--spec-type" for v in value.split(",") if "=" not in v.split(":", 1)[0]]
        flags = replace(reference, binary=str(profile.binary), groups=reference.groups + extra,
                        spec_types=reference.spec_types + tuple(spec_types))
        argv = build_argv(profile, flags)
        return render_unit(profile, argv, scope="user", template=default_template_path().read_text()), ""
    except SpecdError as exc:
        return None, str(exc)
    except Exception as exc:
        raise Crash(f"{type(exc).__name__}: {exc}") from exc


class Crash(Exception):
    pass


def _unit_vars(loaded: truth.Loaded, executed: truth.Executed, base: dict[str, str]) -> dict[str, str]:
    """Variables the unit sets that llama-server (or CUDA, ROCm, ...) sees, minus those only used
    to build the command line (a profile may inline them)."""
    referenced = {a or b for word in (loaded.exec_start[0][1] if loaded.exec_start else ())
                  for a, b in _VARIABLE.findall(word)}
    return {k: v for k, v in executed.env.items() if base.get(k) != v and k not in referenced}


def explains(message: str, needles: list[str]) -> bool:
    lowered = message.lower()
    return any(needle and needle.lower() in lowered for needle in needles)


def refusal_needles(attempt: Attempt, executed: truth.Executed | None,
                     command: ServerCommand | NotAServerCommand | None) -> list[str]:
    if executed is not None and executed.argv is None:
        files = [p for p, optional in attempt.original.environment_files if not optional]
        command_line = " ".join(a for _, argv in attempt.original.exec_start for a in argv)
        return [*files, *(Path(p).name for p in files), *(a or b for a, b in _VARIABLE.findall(command_line)),
                "EnvironmentFile"]
    if isinstance(command, NotAServerCommand):
        return [*command.names, "script", "shell", "wrapper", "bash -c", "sh -c"]
    words = [w for _, argv in attempt.original.exec_start for w in argv if len(w) > 2]
    return [attempt.import_from, attempt.file.name, *words, "ExecStart", "Environment"]


def compare(original: truth.Executed, original_loaded: truth.Loaded, rendered: truth.Executed,
             rendered_loaded: truth.Loaded, aliases: Aliases, base: dict[str, str], work: Path) -> list[str]:
    problems: list[str] = []
    if original.argv is None:
        # systemd would not start the original (a required EnvironmentFile= is missing): the render
        # must keep the same unexpanded command line and the same environment files.
        before = original_loaded.exec_start[0][1][1:]
        after = rendered_loaded.exec_start[0][1][1:] if rendered_loaded.exec_start else ()
        problems += [f"unexpanded argv: {problem}" for problem in compare_args(before, after, aliases)]
        missing = set(original_loaded.environment_files) - set(rendered_loaded.environment_files)
        if missing:
            problems.append(f"lost EnvironmentFile= {sorted(missing)}")
        return problems
    if rendered.argv is None:
        return [f"the rendered unit would not start: {rendered.failure}"]
    before_command = server_command(original.path, original.argv, original.env, work)
    after_command = server_command(rendered.path, rendered.argv, rendered.env, work)
    if isinstance(before_command, NotAServerCommand) or isinstance(after_command, NotAServerCommand):
        if (original.path, original.argv) != (rendered.path, rendered.argv):
            problems.append(f"command differs: {[original.path, *original.argv]} -> {[rendered.path, *rendered.argv]}")
    else:
        problems += command_problems(before_command, after_command, aliases)
    return problems + _environment_problems(original, original_loaded, rendered, base)


def _environment_problems(original: truth.Executed, original_loaded: truth.Loaded, rendered: truth.Executed,
                          base: dict[str, str]) -> list[str]:
    problems = [f"environment {key}={value!r} -> {rendered.env.get(key)!r}"
                for key, value in sorted(_unit_vars(original_loaded, original, base).items())
                if rendered.env.get(key) != value]
    return problems + [f"added environment {key}={rendered.env[key]!r}"
                       for key in sorted(set(rendered.env) - set(original.env)) if key.startswith("LLAMA_ARG_")]


_HEADER = """# `specd import` on the real-world corpus (tests/corpus)

- command: `{command}`
- machine: {machine}
- date: {date}
- specd commit: {commit}
- truth: the real systemd's parse and exec-time expansion of each original unit (a bash program: what
  the real bash execs), read as llama-server reads its argv (tests/system/server_argv.py: options and
  their values from the real llama-server's --help, `_` as `-` in long options, the last value of an
  option given twice); see tests/system/test_corpus.py
- round trip: the same llama-server binary and wrapper, the same options with the same values (any
  order), the same words that are no option in the same order and place, nothing added (not even
  llama-server's defaults), the same environment, and the same served id
- served id: the id llama-server lists first in /v1/models for the original command (its first
  --alias, else the -hf repo as given, else the model path as given: tests/system/test_served_id.py
  checks that rule against the real binary) must be the id the imported profile's health gate asks
  for (its alias); `served` shows both
- units: in-sample (the importer was developed on them); units_heldout: held out since issue 11
  (not opened during issue 34's work); units_heldout2 / llama_swap_heldout2: gathered at the end of
  issue 34 by the rule committed before they were read (tests/corpus/HELDOUT2.md); units_heldout3:
  gathered after the in-sample fixes of branch import3, by the rule committed before they were read
  (tests/corpus/HELDOUT3.md)
- llama-swap: each model either becomes a profile whose `specd show` renders (the render alone where
  show objects only that the binary or model file is not on this box) and whose llama-server argv
  round-trips against the model's cmd as llama-swap expands it, or is refused with a reason
{baseline}
"""


def write_results(section: str, rows: list[Row], summary: dict[str, object]) -> None:
    if os.environ.get("SPECD_WRITE_RESULTS") != "1":
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    # SPECD_RESULTS_NAME=import-corpus-baseline: the same cases and truth run against another importer
    name = os.environ.get("SPECD_RESULTS_NAME", "import-corpus")
    path = RESULTS / f"{name}.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=False).stdout.strip()
    data.update({
        "command": os.environ.get("SPECD_RESULTS_COMMAND", "SPECD_WRITE_RESULTS=1 .venv/bin/python -m pytest "
                                  "-p no:cacheprovider -q -n 0 tests/system/test_corpus.py"),
        "machine": f"{platform.node()}: {platform.platform()} ({platform.uname().version}), {os.cpu_count()} CPUs, "
                   "systemd " + subprocess.run(["systemctl", "--version"], capture_output=True, text=True,
                                               check=False).stdout.split()[1],
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "specd_commit": commit,
    })
    data[section] = {"summary": summary, "rows": [asdict(r) for r in rows]}
    path.write_text(json.dumps(data, indent=2) + "\n")
    write_markdown(name)


_UNIT_SECTIONS = ("units", "units_heldout", "units_heldout2", "units_heldout3")
_SECTIONS = (*_UNIT_SECTIONS, "llama_swap", "llama_swap_heldout2")
_SHOWN = ("units", "knowable", "round-trips", "knowable_round_trip_share", "importable", "importable_round_trip_share",
          "round_trip_share", "refused",
          "silently-wrong", "traceback", "refused-unclear", "accepted-then-refused", "served_ids_checked",
          "served_ids_same", "models", "configs", "bar", "bar_met")


def write_markdown(name: str = "import-corpus") -> None:
    """benchmarks/results/NAME.md from NAME.json: the header, a table of every section's summary (and the
    baseline's beside it, where there is one), then each section's rows."""
    data = json.loads((RESULTS / f"{name}.json").read_text())
    baseline_path = RESULTS / "import-corpus-baseline.json"
    baseline = json.loads(baseline_path.read_text()) if baseline_path.exists() and name == "import-corpus" else {}
    lines = [_HEADER.format(command=data["command"], machine=data["machine"], date=data["date"],
                            commit=data.get("specd_commit", ""),
                            baseline=("- baseline (the importer before issue 34, same cases, same truth): "
                                      "[import-corpus-baseline.md](import-corpus-baseline.md), in the table's "
                                      "`baseline` rows") if baseline else "")]
    sections = [s for s in _SECTIONS if s in data]
    lines += [f"- note: {data['note']}", ""] if data.get("note") else []
    history = sorted((RESULTS / "import-corpus-history").glob("*.md")) if name == "import-corpus" else []
    if history:
        lines += ["- earlier runs on the same sets (the second held-out set's figures before the importer "
                  "changes reading it led to): " + ", ".join(f"[{h.stem}](import-corpus-history/{h.name})"
                                                            for h in history), ""]
    lines += ["## summary", "", "| set | " + " | ".join(_SHOWN) + " |", "|" + " --- |" * (len(_SHOWN) + 1)]
    for section in sections:
        for label, source in ((section, data), (f"{section} (baseline)", baseline)):
            if section in source:
                summary = source[section]["summary"]
                lines.append(f"| {label} | " + " | ".join(str(summary.get(k, "")) for k in _SHOWN) + " |")
    lines.append("")
    for section in sections:
        lines += [f"## {section}", "", "summary: " + json.dumps(data[section]["summary"]), "",
                  "| file | source | outcome | served id (before -> gate) | detail |",
                  "| --- | --- | --- | --- | --- |"]
        for row in data[section]["rows"]:
            detail = str(row["detail"]).replace("|", "\\|").replace("\n", " ")[:300]
            served = str(row.get("served", "")).replace("|", "\\|")
            lines.append(f"| `{row['file']}` | {row['source']} | {row['outcome']} | {served} | {detail} |")
        lines.append("")
    (RESULTS / f"{name}.md").write_text("\n".join(lines))


# Refusals whose cause is the unit or this box, not the importer: a value its variable leaves empty
# (nothing sets it here), a container. (A Unix-socket --host is no longer one: it imports, specd.endpoint.)
_NOT_THE_IMPORTER = re.compile(r"is not set|in a container")


def unit_summary(rows: list[Row], bar: float) -> dict[str, object]:
    """Counts; the round-trip share of all units; of the units whose llama-server argv is knowable (systemd
    starts the unit and a llama-server command line is in what it runs: issue 34's measure); and of those
    minus the refusals whose cause is the unit or this box (_NOT_THE_IMPORTER), named in `set_aside`.
    `bar_met` is judged on the knowable share."""
    counts = Counter(r.outcome for r in rows)
    knowable = [r for r in rows if r.knowable]
    share = sum(r.outcome == "round-trips" for r in knowable) / max(len(knowable), 1)
    aside = [r for r in knowable if r.outcome == "refused" and _NOT_THE_IMPORTER.search(r.detail)]
    importable = [r for r in knowable if r not in aside]
    checked = [r for r in rows if r.served]
    return {"units": len(rows), **dict(sorted(counts.items())),
            "round_trip_share": round(counts["round-trips"] / len(rows), 3), "knowable": len(knowable),
            "knowable_round_trips": sum(r.outcome == "round-trips" for r in knowable),
            "knowable_round_trip_share": round(share, 3), "bar": bar, "bar_met": share >= bar,
            "importable": len(importable),
            "importable_round_trip_share": round(sum(r.outcome == "round-trips" for r in importable)
                                                 / max(len(importable), 1), 3),
            "set_aside": [r.file for r in aside],
            "served_ids_checked": len(checked), "served_ids_same": sum(_same_id(r.served) for r in checked)}


def _same_id(served: str) -> bool:
    before, _, gate = served.partition(" -> ")
    return before == gate


def resummarise(name: str = "import-corpus") -> None:
    """Summaries recomputed from the rows kept in NAME.json (after a change of `unit_summary`), then the
    markdown written again: `python -m tests.system.corpus_rig NAME`."""
    path = RESULTS / f"{name}.json"
    data = json.loads(path.read_text())
    for section in _UNIT_SECTIONS:
        if section in data:
            rows = [Row(**row) for row in data[section]["rows"]]
            data[section]["summary"] = unit_summary(rows, float(str(data[section]["summary"]["bar"])))
    path.write_text(json.dumps(data, indent=2) + "\n")
    write_markdown(name)


def table(rows: list[Row]) -> str:
    return "\n".join(f"{r.outcome:22} {r.file}: {r.detail[:240]} [{r.served}]" for r in rows)


if __name__ == "__main__":
    resummarise(*sys.argv[1:2])
