"""What the real systemd runs for a unit: the truth the import round-trip tests compare against.

Two steps, both done by systemd itself, none by specd:
1. Load: the unit file goes into the private `systemd --user` manager; its D-Bus properties
   `ExecStart` (argv after quoting, C escapes, continuations, comments and specifiers),
   `Environment` and `EnvironmentFiles` are systemd's own parse (`systemctl show -p ExecStart`
   prints the same, but joins argv with spaces, which loses argument boundaries).
2. Exec: a oneshot probe unit with the same Environment=/EnvironmentFile= and the same argv,
   whose program records what it received, lets systemd do its exec-time work: reading the
   environment files, `$VAR` (whole word: split into several arguments) and `${VAR}` (one
   argument) expansion, `$$`. A unit whose required EnvironmentFile= is missing fails here the way
   the real one would fail to start.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specd.setup.sandbox import PrivateSystemd

_RECORDER = ("import json, os, sys; "
             "json.dump({'argv': sys.argv[2:], 'env': dict(os.environ)}, open(sys.argv[1], 'w'))")
# Variables systemd sets per invocation; they differ between any two runs.
PER_RUN_VARIABLES = frozenset({"INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID", "MANAGERPID", "LISTEN_PID",
                               "LISTEN_FDS", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "MAINPID", "WATCHDOG_PID",
                               "WATCHDOG_USEC", "MONITOR_SERVICE_RESULT", "MONITOR_EXIT_CODE",
                               "MONITOR_EXIT_STATUS", "MONITOR_INVOCATION_ID", "MONITOR_UNIT"})


@dataclass(frozen=True)
class Loaded:
    """A unit as systemd parsed it at load time."""

    unit: str
    load_state: str
    load_error: str
    exec_start: tuple[tuple[str, tuple[str, ...]], ...]  # (path, argv) per ExecStart= line
    environment: tuple[str, ...]  # "NAME=value", specifiers resolved
    environment_files: tuple[tuple[str, bool], ...]  # (path, missing is fine)


@dataclass(frozen=True)
class Executed:
    """What the program of a unit's (single) ExecStart= would receive from systemd."""

    path: str
    argv: tuple[str, ...] | None  # argv[1:]; None when systemd would not start it
    env: dict[str, str] = field(default_factory=dict)
    failure: str = ""  # why systemd would not start it (the probe's Result=)


def _busctl(manager: PrivateSystemd, *args: str) -> list[Any]:  # busctl's JSON, read right below
    result = subprocess.run(["busctl", "--user", "--json=short", *args], env=manager.env, capture_output=True,
                            text=True, timeout=30, check=False)
    if result.returncode != 0:
        raise AssertionError(f"busctl {' '.join(args)}: {result.stderr.strip()}")
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def _systemctl(manager: PrivateSystemd, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemctl", "--user", *args], env=manager.env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def daemon_reload(manager: PrivateSystemd) -> None:
    result = _systemctl(manager, "daemon-reload")
    assert result.returncode == 0, result.stderr


def install(manager: PrivateSystemd, file_name: str, data: bytes) -> Path:
    """Put a unit file into the manager's unit directory (call daemon_reload before reading it)."""
    manager.unit_dir.mkdir(parents=True, exist_ok=True)
    path = manager.unit_dir / file_name
    path.write_bytes(data)
    return path


def remove(manager: PrivateSystemd, file_name: str) -> None:
    (manager.unit_dir / file_name).unlink(missing_ok=True)


def read_loaded(manager: PrivateSystemd, unit: str) -> Loaded:
    [loaded] = _busctl(manager, "call", "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                       "org.freedesktop.systemd1.Manager", "LoadUnit", "s", unit)
    path = str(loaded["data"][0])
    state, error = _busctl(manager, "get-property", "org.freedesktop.systemd1", path, "org.freedesktop.systemd1.Unit",
                           "LoadState", "LoadError")
    load_error = state["data"]
    error_text = str(error["data"][1]) if error["data"][0] else ""
    if load_error != "loaded":
        return Loaded(unit, str(load_error), error_text, (), (), ())
    exec_start, environment, files = _busctl(manager, "get-property", "org.freedesktop.systemd1", path,
                                             "org.freedesktop.systemd1.Service", "ExecStart", "Environment",
                                             "EnvironmentFiles")
    commands = tuple((str(entry[0]), tuple(str(a) for a in entry[1]))
                     for entry in exec_start["data"])
    return Loaded(unit, "loaded", error_text, commands,
                  tuple(str(e) for e in environment["data"]),
                  tuple((str(p), bool(ok)) for p, ok in files["data"]))


def _quote(arg: str) -> str:
    """A double-quoted unit-file word that systemd reads back as `arg` (before `$` expansion)."""
    out = []
    for char in arg:
        if char == "\\":
            out.append("\\\\")
        elif char == '"':
            out.append('\\"')
        elif char == "%":
            out.append("%%")
        elif ord(char) < 32 or ord(char) == 127:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def probe_unit_text(loaded: Loaded, record_to: Path) -> str:
    """A oneshot unit that runs the recorder with `loaded`'s environment and ExecStart arguments."""
    [(_, argv)] = loaded.exec_start
    lines = ["[Service]", "Type=oneshot"]
    lines += [f"Environment={_quote(assignment)}" for assignment in loaded.environment]
    lines += [f"EnvironmentFile={'-' if optional else ''}{path.replace('%', '%%')}"
              for path, optional in loaded.environment_files]
    words = [sys.executable, "-c", _RECORDER, str(record_to), *argv[1:]]
    lines.append("ExecStart=" + " ".join(_quote(word) for word in words))
    return "\n".join(lines) + "\n"


def execute_all(manager: PrivateSystemd, loaded_units: list[Loaded], work: Path) -> list[Executed]:
    """Run one probe per loaded unit (one daemon-reload for all of them)."""
    probes: list[tuple[str, Path]] = []
    for index, loaded in enumerate(loaded_units):
        name = f"specd-exec-probe-{index}.service"
        record = work / f"probe-{index}.json"
        record.unlink(missing_ok=True)
        install(manager, name, probe_unit_text(loaded, record).encode())
        probes.append((name, record))
    daemon_reload(manager)
    results = []
    try:
        for loaded, (name, record) in zip(loaded_units, probes, strict=True):
            started = _systemctl(manager, "start", name)
            [(path, _)] = loaded.exec_start
            if started.returncode != 0 or not record.exists():
                result = _systemctl(manager, "show", "-p", "Result", "--value", name).stdout.strip()
                results.append(Executed(path, None, {}, f"systemd would not start it (Result={result})"))
                continue
            data = json.loads(record.read_text())
            env = {k: v for k, v in data["env"].items() if k not in PER_RUN_VARIABLES}
            results.append(Executed(path, tuple(data["argv"]), env))
    finally:
        for name, _ in probes:
            _systemctl(manager, "reset-failed", name)
            remove(manager, name)
        daemon_reload(manager)
    return results
