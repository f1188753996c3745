"""What the CLI prints, read as a user reads it: every word of a message kept (a `[proxy]` is text,
not a style tag), whole words and paths at 80 columns, and the abstract base explained.

Runs the real `specd` command in a subprocess against a config, profiles and a state database in a
tmp dir; none of these commands needs systemd.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specd.deploy.history import History
from specd.paths import StateDir

UNIT = "llama-out.service"
REVERTED = ("llama-out.service exited while loading (status 1) after 1.2 s; reverted to autoregressive, which is "
            "healthy again")
NO_PROXY = ("strategy: restart, because the deployment has no [proxy]: clients talk to the server's own port, "
            "which a second server cannot take over")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "base.toml").write_text('abstract = true\ndescription = "shared settings"\n'
                                        'binary = "/usr/bin/true"\nalias = "tiny"\nport = 8080\n')
    (profiles / "plain.toml").write_text('inherits = "base"\ndescription = "plain, [proxy] off"\n'
                                         'model = "/nonexistent/plain.gguf"\n')
    (profiles / "drafty.toml").write_text('inherits = "base"\nmodel = "/m.gguf"\n[speculative]\ntype = "draft"\n')
    config = tmp_path / "specd.toml"
    config.write_text(f'unit = "{UNIT}"\nscope = "user"\nprofiles_dir = "{profiles}"\n')
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "DBUS_", "SPECD_"))}
    return {**keep, "HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "state"),
            "XDG_CONFIG_HOME": str(tmp_path / "config"), "SPECD_CONFIG": str(config), "COLUMNS": "80"}


def specd(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specd", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_bracketed_words_in_messages_and_errors_are_printed(env: dict[str, str]) -> None:
    """rich read "[proxy]" and "[daemon]" as style tags and dropped them: "has no : clients talk to"."""
    token = specd(env, "web-token")
    assert token.returncode == 0 and '[daemon] http_listen = "127.0.0.1:8090"' in token.stdout, token
    refused = specd(env, "show", "drafty")
    assert refused.returncode == 2 and "[speculative] type 'draft' needs draft_model" in refused.stderr, refused


def test_profiles_keeps_brackets_and_explains_the_abstract_base(env: dict[str, str]) -> None:
    listing = specd({**env, "COLUMNS": "200"}, "profiles")
    assert listing.returncode == 0, listing
    assert "plain, [proxy] off" in listing.stdout
    assert "base (base)" not in listing.stdout
    assert "shared settings (abstract: the others inherit it; never switched to)" in listing.stdout, listing.stdout


def test_history_at_80_columns_keeps_whole_words_and_every_bracket(env: dict[str, str]) -> None:
    history = History(StateDir(Path(env["XDG_STATE_HOME"]) / "specd").db)
    first = history.add(UNIT, kind="switch", profile="autoregressive", unit_sha256=None, backup_path=None,
                        previous_id=None, trigger="cli", outcome="ok", detail=NO_PROXY)
    history.add(UNIT, kind="switch", profile="broken-model", unit_sha256=None, backup_path=None, previous_id=first,
                trigger="cli", outcome="reverted", detail=REVERTED)
    history.close()
    result = specd(env, "history")
    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), result.stdout
    words = result.stdout.split()
    for detail in (NO_PROXY, REVERTED):
        text = " ".join(detail.split())
        assert text in " ".join(words), result.stdout  # every word, whole and in order
    assert max(len(line.split()) for line in lines if line.startswith(" ")) >= 5, result.stdout  # not a word a line


def test_doctor_at_80_columns_never_cuts_a_path(env: dict[str, str], tmp_path: Path) -> None:
    cache = tmp_path / "a-cache-directory-with-a-long-name" / "specd"
    result = specd({**env, "SPECD_CACHE": str(cache)}, "doctor")
    build = cache / "llama-server" / "0.3.36-cpu" / "build" / "bin" / "llama-server"
    assert str(build) in result.stdout.split(), result.stdout  # one word on one line: not folded
    assert "problem  tiny llama-server build" in result.stdout


def test_events_keep_each_journal_line_on_its_own_line_at_80_columns(env: dict[str, str]) -> None:
    history = History(StateDir(Path(env["XDG_STATE_HOME"]) / "specd").db)
    history.event(UNIT, "revert-journal", "generation 2\nerror: failed to load model\nexiting")
    history.event(UNIT, "tune", NO_PROXY)
    history.close()
    result = specd(env, "history", "--events")
    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), result.stdout
    stripped = [line.strip() for line in lines]
    assert "error: failed to load model" in stripped and "exiting" in stripped, result.stdout
    assert " ".join(NO_PROXY.split()) in " ".join(result.stdout.split())
