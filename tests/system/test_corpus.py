"""`specd import` on real units and llama-swap configs from public repositories (tests/corpus).

For every unit: systemd itself says what the unit runs (tests/system/systemd_truth.py: load it
into the private manager, then let systemd do its exec-time expansion in a probe); when that is a
`bash -c` program, the real bash runs it up to its `exec` (tests/system/server_argv.py). `specd import`
turns the unit into a profile; the profile is rendered back into a unit (`specd show --json`, or
the same render without the box checks when `show` refuses only because the unit's binary or
model is not on this machine), and that unit goes through the same systemd truth. Outcomes:

- round-trips: the llama-server argv is the same multiset of (flag, value) pairs, short and long
  spellings equal (aliases from the real llama-server's --help); same wrapper (toolbox, ...) and
  binary; every environment variable that llama-server or its libraries can see is kept.
- refused: import exits non-zero, writes nothing, and its message names the cause (for a command
  with no llama-server command line: the script or shell; for a missing EnvironmentFile=: that
  file or its variables; otherwise the unit file or a word of the unit).
- refused-unclear / accepted-then-refused / silently-wrong / traceback: failures.

The issue's bar (issue 11): >= 90% of the units round-trip, none silently wrong, no traceback,
every other unit refused clearly; every llama-swap model becomes a profile.
`SPECD_WRITE_RESULTS=1` writes benchmarks/results/import-corpus.{json,md}.
"""

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
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml

from specd.setup.sandbox import PrivateSystemd
from tests.conftest import LLAMA_SERVER, REPO, require_real_server
from tests.system import systemd_truth as truth
from tests.system.server_argv import (
    Aliases,
    NotAServerCommand,
    ServerCommand,
    compare_args,
    flag_pairs,
    read_aliases,
    server_command,
)

pytestmark = pytest.mark.systemd

CORPUS = REPO / "tests" / "corpus"
UNITS = sorted((CORPUS / "units").iterdir())
# Gathered after the importer was built (SOURCES.md says how): not used to develop it, so its
# figure is held out; reported apart, held to the same no-silent-error rule, not to the bar.
HELD_OUT = sorted((CORPUS / "units-heldout").iterdir())
SWAP_CONFIGS = sorted((CORPUS / "llama-swap").iterdir())
MANIFEST = tomllib.loads((CORPUS / "manifest.toml").read_text())
RESULTS = REPO / "benchmarks" / "results"
ROUND_TRIP_BAR = 0.90  # issue 11's bar. The units that do not round-trip are refused by name, with causes
# no importer can remove: a wrapper script with no arguments that picks flags from nvidia-smi at start,
# a --model whose variable comes from an optional env file that is not in its repository, and a
# Unix-socket --host (specd's gate and proxy speak TCP).
Outcome = Literal["round-trips", "refused", "refused-unclear", "accepted-then-refused", "silently-wrong",
                  "traceback"]
_SOURCE_ROW = re.compile(r"^\| `([^`]+)` \| \[([^\]]+)\]\([^)]*\) \| `([^`]+)` \| `([0-9a-f]{40})` \|", re.MULTILINE)
_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


@dataclass(frozen=True)
class Row:
    file: str
    source: str
    outcome: Outcome
    detail: str


@dataclass(frozen=True)
class Attempt:
    """One corpus unit on its way through import and render."""

    file: Path
    unit: str  # the name systemd knows it by
    import_from: str
    profile: str
    original: truth.Loaded


def _sources() -> dict[str, str]:
    text = (CORPUS / "SOURCES.md").read_text()
    return {m.group(1): f"{m.group(2)}:{m.group(3)}@{m.group(4)[:12]}" for m in _SOURCE_ROW.finditer(text)}


def test_every_corpus_file_is_listed_with_its_source() -> None:
    listed = _sources()
    on_disk = {p.name for folder in ("units", "units-heldout", "llama-swap", "support")
               for p in (CORPUS / folder).iterdir()}
    assert on_disk == set(listed), (f"not in SOURCES.md: {on_disk - set(listed)}; "
                                    f"listed but absent: {set(listed) - on_disk}")
    assert len(UNITS) >= 25 and len(SWAP_CONFIGS) >= 3


def _specd(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specd", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def _crashed(result: subprocess.CompletedProcess[str]) -> bool:
    output = result.stdout + result.stderr
    return "Traceback (most recent call last)" in output or "internal error" in output


def _deployment(tmp_path: Path, name: str) -> tuple[dict[str, str], Path]:
    profiles = tmp_path / name / "profiles"
    profiles.mkdir(parents=True)
    config = tmp_path / name / "specd.toml"
    config.write_text(f'unit = "specd-corpus-target.service"\nscope = "user"\nprofiles_dir = "{profiles}"\n')
    env = {**os.environ, "SPECD_CONFIG": str(config), "XDG_STATE_HOME": str(tmp_path / name / "state")}
    return env, profiles


def _install_originals(manager: PrivateSystemd) -> list[tuple[Path, str, str]]:
    """(corpus file, unit name, what to pass to --from) for each corpus unit, installed in the manager."""
    home = manager.env["HOME"]
    installed = []
    for index, file in enumerate([*UNITS, *HELD_OUT]):
        meta = MANIFEST.get(file.name, {})
        for support in meta.get("support", []):
            target = Path(str(support["to"]).replace("%h", home))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((CORPUS / support["file"]).read_bytes())
        if file.name.endswith("@.service"):
            template = f"specd-corpus-{index}@.service"
            truth.install(manager, template, file.read_bytes())
            unit = f"specd-corpus-{index}@{meta['instance']}.service"
            installed.append((file, unit, unit))
        else:
            unit = f"specd-corpus-{index}.service"
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


def _render(env: dict[str, str], profiles: Path, name: str, original_args: tuple[str, ...]) -> tuple[str | None, str]:
    """The unit text the profile renders to, or the refusal. `show` first; its render alone when the
    only objection is that the unit's binary or model file is not on this machine."""
    shown = _specd(env, "show", name, "--json")
    if shown.returncode == 0:
        return str(json.loads(shown.stdout)["unit"]), ""
    message = (shown.stderr or shown.stdout).strip()
    if _crashed(shown):
        raise _Crash(message)
    if not re.search(r"no such binary|no such model file|not executable|cannot read", message):
        return None, message
    from specd.errors import SpecdError
    from specd.profiles.flags import BinaryFlags, binary_flags
    from specd.profiles.load import load_profile
    from specd.unit.render import build_argv, default_template_path, render_unit

    try:
        profile = load_profile(profiles, name)
        reference = binary_flags(LLAMA_SERVER)
        # The unit ran with its own binary, so that binary accepts every flag the unit passed.
        extra = tuple((arg.split("=", 1)[0],) for arg in original_args
                      if arg.startswith("-") and not reference.has(arg.split("=", 1)[0]))
        spec_types = [v for flag, value in itertools.pairwise(original_args)
                      if flag == "--spec-type" for v in value.split(",")]
        flags = BinaryFlags(str(profile.binary), reference.groups + extra,
                            reference.spec_types + tuple(spec_types))
        argv = build_argv(profile, flags)
        return render_unit(profile, argv, scope="user", template=default_template_path().read_text()), ""
    except SpecdError as exc:
        return None, str(exc)
    except Exception as exc:
        raise _Crash(f"{type(exc).__name__}: {exc}") from exc


class _Crash(Exception):
    pass


def _unit_vars(loaded: truth.Loaded, executed: truth.Executed, base: dict[str, str]) -> dict[str, str]:
    """Variables the unit sets that llama-server (or CUDA, ROCm, ...) sees, minus those only used
    to build the command line (a profile may inline them)."""
    referenced = {a or b for word in (loaded.exec_start[0][1] if loaded.exec_start else ())
                  for a, b in _VARIABLE.findall(word)}
    return {k: v for k, v in executed.env.items() if base.get(k) != v and k not in referenced}


def _explains(message: str, needles: list[str]) -> bool:
    lowered = message.lower()
    return any(needle and needle.lower() in lowered for needle in needles)


def _refusal_needles(attempt: Attempt, executed: truth.Executed | None,
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


def _compare(original: truth.Executed, original_loaded: truth.Loaded, rendered: truth.Executed,
             rendered_loaded: truth.Loaded, aliases: Aliases, base: dict[str, str], work: Path) -> list[str]:
    problems: list[str] = []
    if original.argv is None:
        # systemd would not start the original (a required EnvironmentFile= is missing): the render
        # must keep the same unexpanded command line and the same environment files.
        before = flag_pairs(original_loaded.exec_start[0][1][1:], aliases)
        after = flag_pairs(rendered_loaded.exec_start[0][1][1:], aliases) if rendered_loaded.exec_start else []
        if sorted(map(str, before)) != sorted(map(str, after)):
            problems.append(f"unexpanded argv differs: {before} -> {after}")
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
        if before_command.wrapper != after_command.wrapper:
            problems.append(f"wrapper {list(before_command.wrapper)} -> {list(after_command.wrapper)}")
        same_binary = (before_command.binary == after_command.binary
                       or (not before_command.binary.startswith("/")
                           and Path(after_command.binary).name == before_command.binary))
        if not same_binary:
            problems.append(f"binary {before_command.binary} -> {after_command.binary}")
        problems += compare_args(before_command.args, after_command.args, aliases)
    return problems + _environment_problems(original, original_loaded, rendered, base)


def _environment_problems(original: truth.Executed, original_loaded: truth.Loaded, rendered: truth.Executed,
                          base: dict[str, str]) -> list[str]:
    problems = [f"environment {key}={value!r} -> {rendered.env.get(key)!r}"
                for key, value in sorted(_unit_vars(original_loaded, original, base).items())
                if rendered.env.get(key) != value]
    return problems + [f"added environment {key}={rendered.env[key]!r}"
                       for key in sorted(set(rendered.env) - set(original.env)) if key.startswith("LLAMA_ARG_")]


def _write_results(section: str, rows: list[Row], summary: dict[str, object]) -> None:
    if os.environ.get("SPECD_WRITE_RESULTS") != "1":
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "import-corpus.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=False).stdout.strip()
    data.update({
        "command": ("SPECD_WRITE_RESULTS=1 .venv/bin/python -m pytest -p no:cacheprovider -q "
                    "tests/system/test_corpus.py"),
        "machine": f"{platform.node()}: {platform.platform()}, {os.cpu_count()} CPUs, systemd "
                   + subprocess.run(["systemctl", "--version"], capture_output=True, text=True,
                                    check=False).stdout.split()[1],
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "specd_commit": commit,
    })
    data[section] = {"summary": summary, "rows": [asdict(r) for r in rows]}
    path.write_text(json.dumps(data, indent=2) + "\n")
    lines = ["# `specd import` on the real-world corpus (tests/corpus)", "",
             f"- command: `{data['command']}`", f"- machine: {data['machine']}", f"- date: {data['date']}",
             f"- specd commit: {commit}",
             ("- truth: the real systemd's parse and exec-time expansion of each original unit (a bash "
              "program: what the real bash execs); see tests/system/test_corpus.py"),
             ("- baseline: specd's importer before issue 11, on the same 39 units: 3 round-trip "
              "(this file at commit 9942713)"),
             ("- units: in-sample (the importer was developed on them); units_heldout: held out (gathered "
              "after it was built, every file of one search; tests/corpus/SOURCES.md)"), ""]
    for name in ("units", "units_heldout", "llama_swap"):
        if name not in data:
            continue
        lines += [f"## {name}", "", "summary: " + json.dumps(data[name]["summary"]), "",
                  "| file | source | outcome | detail |", "| --- | --- | --- | --- |"]
        for row in data[name]["rows"]:
            detail = str(row["detail"]).replace("|", "\\|").replace("\n", " ")[:300]
            lines.append(f"| `{row['file']}` | {row['source']} | {row['outcome']} | {detail} |")
        lines.append("")
    (RESULTS / "import-corpus.md").write_text("\n".join(lines))


def _table(rows: list[Row]) -> str:
    return "\n".join(f"{r.outcome:22} {r.file}: {r.detail[:240]}" for r in rows)


def test_corpus_units_round_trip_or_are_refused_clearly(systemd_manager: PrivateSystemd, tmp_path: Path) -> None:
    require_real_server()
    aliases = read_aliases(LLAMA_SERVER)
    sources = _sources()
    attempts = [Attempt(file, unit, source, f"corpus{index}", truth.read_loaded(systemd_manager, unit))
                for index, (file, unit, source) in enumerate(_install_originals(systemd_manager))]
    env, profiles = _deployment(tmp_path, "units")
    runnable = [a.original for a in attempts if a.original.load_state == "loaded" and len(a.original.exec_start) == 1]
    base_probe = truth.Loaded("base", "loaded", "", (("/bin/true", ("/bin/true",)),), (), ())
    executions = truth.execute_all(systemd_manager, [*runnable, base_probe], tmp_path)
    base = executions.pop().env
    original_exec = {loaded.unit: executed for loaded, executed in zip(runnable, executions, strict=True)}

    rows: dict[str, Row] = {}
    rendered_units: dict[str, str] = {}
    for index, attempt in enumerate(attempts):
        executed = original_exec.get(attempt.unit)
        command = (server_command(executed.path, executed.argv, executed.env, tmp_path)
                   if executed and executed.argv is not None else None)
        imported = _specd(env, "import", attempt.profile, "--from", attempt.import_from)
        message = (imported.stderr or imported.stdout).strip()
        source = sources.get(attempt.file.name, "?")
        if _crashed(imported):
            rows[attempt.file.name] = Row(attempt.file.name, source, "traceback", message[-400:])
            continue
        if imported.returncode != 0:
            written = (profiles / f"{attempt.profile}.toml").exists()
            clear = (not written and str(profiles / attempt.profile) not in message
                     and _explains(message, _refusal_needles(attempt, executed, command)))
            rows[attempt.file.name] = Row(attempt.file.name, source, "refused" if clear else "refused-unclear",
                                          message[:400])
            continue
        original_args = command.args if isinstance(command, ServerCommand) else ()
        try:
            text, refusal = _render(env, profiles, attempt.profile, original_args)
        except _Crash as crash:
            rows[attempt.file.name] = Row(attempt.file.name, source, "traceback", f"at render: {crash}")
            continue
        if text is None:
            rows[attempt.file.name] = Row(attempt.file.name, source, "accepted-then-refused",
                                          f"import wrote a profile that show refuses: {refusal[:300]}")
            continue
        name = f"specd-corpus-rendered-{index}.service"
        truth.install(systemd_manager, name, text.encode())
        rendered_units[attempt.file.name] = name
    truth.daemon_reload(systemd_manager)

    rendered_loaded = {file: truth.read_loaded(systemd_manager, unit) for file, unit in rendered_units.items()}
    startable = [(file, loaded) for file, loaded in rendered_loaded.items() if len(loaded.exec_start) == 1]
    rendered_exec = dict(zip([f for f, _ in startable],
                             truth.execute_all(systemd_manager, [l for _, l in startable], tmp_path), strict=True))
    by_file = {a.file.name: a for a in attempts}
    for file, loaded in rendered_loaded.items():
        attempt = by_file[file]
        source = sources.get(file, "?")
        if file not in rendered_exec:
            rows[file] = Row(file, source, "silently-wrong",
                             f"rendered unit: LoadState={loaded.load_state} {loaded.load_error}, "
                             f"{len(loaded.exec_start)} ExecStart=")
            continue
        original = original_exec.get(attempt.unit)
        if original is None:
            rows[file] = Row(file, source, "silently-wrong",
                             f"imported, but systemd does not load the original: {attempt.original.load_state} "
                             f"{attempt.original.load_error}")
            continue
        problems = _compare(original, attempt.original, rendered_exec[file], loaded, aliases, base, tmp_path)
        rows[file] = Row(file, source, "silently-wrong" if problems else "round-trips", "; ".join(problems))
    for name in rendered_units.values():
        truth.remove(systemd_manager, name)
    truth.daemon_reload(systemd_manager)

    report = ""
    for section, files in (("units", UNITS), ("units_heldout", HELD_OUT)):
        ordered = [rows[f.name] for f in files]
        counts = Counter(r.outcome for r in ordered)
        figure = counts["round-trips"] / len(ordered)
        summary: dict[str, object] = {"units": len(ordered), **dict(sorted(counts.items())),
                                      "round_trip_share": round(figure, 3)}
        if section == "units":
            summary |= {"bar": ROUND_TRIP_BAR, "bar_met": figure >= ROUND_TRIP_BAR}
        _write_results(section, ordered, summary)
        report += f"{section}: {summary}\n{_table(ordered)}\n"
    every = Counter(r.outcome for r in rows.values())
    assert every["traceback"] == 0, report
    assert every["silently-wrong"] == 0, report
    assert every["refused-unclear"] + every["accepted-then-refused"] == 0, report
    assert sum(r.outcome == "round-trips" for f in UNITS for r in [rows[f.name]]) / len(UNITS) >= ROUND_TRIP_BAR, report


def _normalised(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _runs_llama_server(model: dict[str, object]) -> bool:
    """Judged from the config's own text, not by specd: does the model's cmd name a llama-server binary?"""
    words = [w.strip('"\'') for w in str(model.get("cmd") or "").split()]
    return any(re.search(r"(^|/)(ik[-_])?llama-server$", w) or w.startswith("${") for w in words[:3])


def test_every_llama_swap_model_becomes_a_profile(systemd_manager: PrivateSystemd, tmp_path: Path) -> None:
    """Every model whose cmd runs llama-server (or a macro that does) becomes a valid profile that
    clients reach by the same name; every other model (a docker wrapper script, a remote proxy-only
    entry) is named in import's output with its reason; nothing crashes."""
    sources = _sources()
    rows: list[Row] = []
    for index, config in enumerate(SWAP_CONFIGS):
        models = yaml.safe_load(config.read_text())["models"]
        env, _ = _deployment(tmp_path, f"swap{index}")
        env["OPENROUTER_API_KEY"] = "sk-or-test"  # cameronr's config reads ${env.OPENROUTER_API_KEY}
        imported = _specd(env, "import", "--from-llama-swap", str(config), "--json")
        message = (imported.stderr or imported.stdout).strip()
        source = sources.get(config.name, "?")
        if _crashed(imported):
            rows.append(Row(config.name, source, "traceback", message[-400:]))
            continue
        try:  # the per-model outcome is printed even when no model could be imported (exit 2)
            outcome = json.loads(imported.stdout)
        except ValueError:
            outcome = {"models": []}
        listing = json.loads(_specd(env, "profiles", "--json").stdout or "[]")
        names = {_normalised(p["name"]) for p in listing}
        aliases = set()
        for profile in listing:
            for alias in re.findall(r'^alias\s*=\s*"([^"]*)"', Path(profile["path"]).read_text(), re.MULTILINE):
                aliases |= {_normalised(a) for a in alias.split(",")}
        serving = [str(m) for m in models if _runs_llama_server(models[m] or {})]
        others = [str(m) for m in models if str(m) not in serving]
        reasons = {str(m["model"]): m["reason"] for m in outcome["models"] if not m["profile"]}
        problems = [f"no profile for {m}" for m in serving if _normalised(m) not in names | aliases]
        problems += [f"{m} neither imported nor explained" for m in others
                     if _normalised(m) not in names and not reasons.get(m)]
        problems += [f"invalid: {p['name']}: {p['error']}" for p in listing if p.get("error")]
        if imported.returncode != 0 and serving:
            problems.append(f"import failed: {message[:300]}")
        rows.append(Row(config.name, source, "silently-wrong" if problems else "round-trips",
                        "; ".join(problems) or f"{len(models)} models: {len(serving)} llama-server -> "
                                                f"{len(listing)} profiles; {len(others)} others explained"))
    counts = Counter(r.outcome for r in rows)
    swap_summary: dict[str, object] = {"configs": len(rows), **dict(sorted(counts.items()))}
    _write_results("llama_swap", rows, swap_summary)
    assert counts["round-trips"] == len(rows), _table(rows)
