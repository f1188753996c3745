"""The CLI as a user meets it: exit codes, clear errors, nothing changed on bad input, locking."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.systemd, pytest.mark.llama, pytest.mark.usefixtures("real_server")]


def snapshot(box) -> dict[str, str]:
    return {p.name: p.read_text() for p in box.unit_path.parent.glob(f"{box.unit}*")}


@pytest.mark.parametrize(
    ("profile_text", "expected"),
    [
        ('inherits = "base"\nctx_sise = 1\n', "did you mean 'ctx_size'"),
        ('inherits = "base"\nport = "x"\n', "'port' must be an integer"),
        ('inherits = "base"\nargs = [\n', "TOML syntax error"),
        ('inherits = "base"\nmodel = "/missing.gguf"\n', "/missing.gguf: no such model file"),
        ('inherits = "base"\nalias = "x\\" --api-key steal"\n', "'alias' must be letters"),
        ('inherits = "base"\nargs = ["--x", "$(reboot)"]\n', "does not accept --x"),
    ],
)
def test_bad_profiles_exit_2_and_change_nothing(box, profile_text: str, expected: str) -> None:
    box.specd("switch", "autoregressive", check=True)
    before = snapshot(box)
    box.write_profile("bad", profile_text)
    result = box.specd("switch", "bad")
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert snapshot(box) == before
    history = json.loads(box.specd("history", "--json", check=True).stdout)
    assert len(history) == 1


@pytest.mark.parametrize(
    "args",
    [["switch"], ["switch", "no-such-profile"], ["rollback", "--to", "abc"], ["rollback", "--to", "999"],
     ["nonsense"], ["show", "../../etc/passwd"], ["status", "--unit", "other"]],
)
def test_wrong_arguments_exit_2_without_traceback(box, args: list[str]) -> None:
    box.specd("switch", "autoregressive", check=True)
    before = snapshot(box)
    result = box.specd(*args)
    assert result.returncode == 2, (args, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert snapshot(box) == before


def test_missing_config_is_a_clear_error(box, tmp_path) -> None:
    result = box.specd("status", env={"SPECD_CONFIG": str(tmp_path / "nope.toml")})
    assert result.returncode == 2 and "no config at" in result.stderr and "quickstart" in result.stderr


def test_rollback_with_nothing_before_is_refused(box) -> None:
    box.specd("switch", "autoregressive", check=True)
    result = box.specd("rollback")
    assert result.returncode == 2 and "nothing to roll back to" in result.stderr


def test_two_concurrent_switches_serialise(box) -> None:
    box.specd("switch", "autoregressive", check=True)
    box.edit_profile("base", stability_s=4)
    command = [sys.executable, "-m", "specd", "switch", "ngram-simple"]
    first = subprocess.Popen(command, env=box.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = Path(box.env["XDG_STATE_HOME"]) / "specd" / "locks" / f"{box.unit}.lock"

    def holder() -> int | None:
        try:
            return int(json.loads(lock.read_text())["pid"])
        except (OSError, ValueError, KeyError):
            return None

    deadline = time.monotonic() + 60
    while holder() != first.pid:  # the first switch holds the lock (for its load and 4 s stability window)
        assert time.monotonic() < deadline and first.poll() is None, "the first switch never took the lock"
        time.sleep(0.05)
    second = box.specd("switch", "ngram-mod")
    _first_out, first_err = first.communicate(timeout=120)
    assert first.returncode == 0, first_err
    assert second.returncode == 75, second.stderr
    assert "busy" in second.stderr and f"pid {first.pid}" in second.stderr and "switch ngram-simple" in second.stderr
    waited = box.specd("switch", "ngram-mod", env={})
    assert waited.returncode == 0
    profiles = [g["profile"] for g in json.loads(box.specd("history", "--json", check=True).stdout)]
    assert profiles == ["ngram-mod", "ngram-simple", "autoregressive"]


def test_profiles_flags_missing_files_and_a_port_clash_with_the_proxy(box) -> None:
    box.write_profile("gone", 'inherits = "base"\nmodel = "/nonexistent/model.gguf"\n')
    box.write_profile("clash", 'inherits = "base"\nport = 18555\n')
    box.config_path.write_text(box.config_path.read_text() + '[proxy]\nlisten = "127.0.0.1:18555"\n')
    listing = {p["name"]: p for p in json.loads(box.specd("profiles", "--json", check=True).stdout)}
    assert listing["gone"]["problems"] == ["/nonexistent/model.gguf: no such file"]
    assert "proxy's listen port" in listing["clash"]["problems"][0]
    assert listing["autoregressive"]["problems"] == [] and listing["base"]["abstract"] is True
    table = box.specd("profiles", env={"COLUMNS": "200"}, check=True).stdout
    assert "no such file" in table


def test_switch_to_an_unknown_profile_lists_the_known_ones(box) -> None:
    refused = box.specd("switch", "nosuch")
    assert refused.returncode == 2
    assert "no such profile file" in refused.stderr and "autoregressive" in refused.stderr


def test_history_reads_whole_words_in_an_80_column_terminal(box) -> None:
    """A restart-only box: no slot/strategy columns repeating "blue restart"; kind, profile, trigger
    and outcome are never cut mid-word (the detail column gives way)."""
    box.specd("switch", "autoregressive", check=True)
    box.specd("switch", "ngram-simple", check=True)
    box.specd("rollback", check=True)
    table = box.specd("history", env={"COLUMNS": "80"}, check=True).stdout
    lines = table.splitlines()
    assert lines[0].split()[:8] == ["gen", "time", "(UTC)", "kind", "profile", "trigger", "outcome", "s"], table
    assert "strategy" not in lines[0] and all(len(line) <= 80 for line in lines), table
    rows = [line.split() for line in lines[2:] if line.split() and line.split()[0].rstrip("*").isdigit()]
    assert [(r[0], r[3], r[4], r[5], r[6]) for r in rows[:3]] == [
        ("3*", "rollback", "autoregressive", "cli", "ok"), ("2", "switch", "ngram-simple", "cli", "ok"),
        ("1", "switch", "autoregressive", "cli", "ok")], table


def test_a_split_mode_this_build_cannot_load_is_refused_and_show_vram_says_why(box) -> None:
    """The CPU build refuses tensor split: `specd switch` stops before touching anything and names the
    mode and the binary's words; `specd show --vram` prints the same and exits 2; for a profile that
    loads, it prints the check in full."""
    box.specd("switch", "autoregressive", check=True)
    before = snapshot(box)
    box.write_profile("tp", 'inherits = "autoregressive"\nargs = ["--split-mode", "tensor"]\n')
    said = "--split-mode tensor: this llama-server cannot load the model with it: LLAMA_SPLIT_MODE_TENSOR needs >= 1"
    result = box.specd("switch", "tp")
    assert result.returncode == 2 and said in " ".join(result.stderr.split()), result.stderr
    assert snapshot(box) == before
    shown = box.specd("show", "tp", "--vram")
    assert shown.returncode == 2 and said in " ".join(shown.stdout.split()), shown.stdout
    plain = json.loads(box.specd("show", "autoregressive", "--vram", "--json", check=True).stdout)
    assert plain["fits"] and plain["vram"][0] == "split mode: layer" and plain["vram"][-1].startswith("verdict: ")
