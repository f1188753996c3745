"""An API key in any file specd writes stays unreadable by other local users (issue 36).

The case the probe found: a hand-written 0600 unit with `--api-key K` in ExecStart=. `specd import`
of it, a switch away from it (its `.pre-*` backup, the unit store, history), a failed switch that
puts it back, and a sweep's variant of a profile that holds a key. Every file under the test's root
that holds K afterwards is checked two ways: its mode and its directories' keep group and others
out, and, as the suite runs as root (CI and this project's machines do), `nobody` tries to read it
with setpriv — beside a 0644 control file `nobody` can read, so the check can fail. The systemd
client and health gate are fakes (tests/fakes/fake_slots.py); the files are real.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from specd.deploy.history import History
from specd.deploy.preflight import Preflight
from specd.deploy.seams import Seams
from specd.deploy.switch import Switcher
from specd.deploy.unitfiles import list_backups
from specd.durable import TMP_INFIX, atomic_write
from specd.errors import HealthError, SwitchFailed
from specd.gpu.gguf import GgufInfo
from specd.paths import StateDir
from specd.profiles.config import Deployment
from specd.profiles.load import load_profile
from specd.secrets import holds_secret, mask, mask_argv
from specd.setup.doctor import keys_readable
from specd.unit.importer import import_unit
from tests.fakes.fake_slots import FakeGate, FakeSlotsSystemd

KEY = "sk-probe-4242-secret"
UNIT = "llama-secret.service"
NOBODY = 65534
HAND_WRITTEN = ("[Unit]\nDescription=hand-written\n[Service]\n"
                f"ExecStart=/opt/llama-server -m /m/x.gguf --alias tiny --port 8080 --api-key {KEY}\n")


def nobody_reads(path: Path) -> bool:
    """Can user `nobody` read the file? (setpriv: drop to its uid and gid, no supplementary groups.)"""
    result = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "cat", str(path)],
                            capture_output=True, check=False)
    return result.returncode == 0


def others_kept_out(path: Path, root: Path) -> bool:
    """No group or other read bit on the file, or a directory on its way that they cannot enter."""
    if stat.S_IMODE(path.stat().st_mode) & 0o044 == 0:
        return True
    return any(stat.S_IMODE(parent.stat().st_mode) & 0o011 == 0 for parent in path.parents if root in parent.parents)


@pytest.fixture
def root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # Not under pytest's tmp dir: that is 0700, which would keep `nobody` out of everything.
    made = Path(tempfile.mkdtemp(prefix="specd-secrets-", dir="/tmp"))
    made.chmod(0o755)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(made / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(made / "state"))
    yield made
    shutil.rmtree(made)


def unit_text(profile: str) -> str:
    return (f"# specd-profile: {profile}\n[Service]\n"
            f"ExecStart=/opt/llama-server -m /m/{profile}.gguf --alias tiny --port 8080\n")


def switcher(deployment: Deployment, state: StateDir, systemd: FakeSlotsSystemd, gate: FakeGate) -> Switcher:
    def fake_preflight(deployment: Deployment, name: str, *, current_main_pid: int = 0) -> Preflight:
        return Preflight(load_profile(deployment.profiles_dir, name), [], unit_text(name), GgufInfo.__new__(GgufInfo),
                         None)

    seams = Seams(deployment, state, History(state.db), connect=lambda: systemd)
    return Switcher(seams, gate=gate, journal=lambda unit, scope: "(fake journal)", preflight=fake_preflight)


def test_no_file_specd_writes_lets_another_user_read_a_key(root: Path) -> None:
    profiles = root / "profiles"
    profiles.mkdir(mode=0o755)
    (profiles / "new.toml").write_text('binary = "/opt/llama-server"\nmodel = "/m/new.gguf"\nalias = "tiny"\n'
                                       "port = 8080\nhealth_timeout_s = 5\nstability_s = 0\n")
    deployment = Deployment(UNIT, "user", profiles)
    deployment.unit_dir.mkdir(parents=True)
    unit = deployment.unit_path
    unit.write_text(HAND_WRITTEN)
    unit.chmod(0o600)
    systemd, gate = FakeSlotsSystemd(), FakeGate()
    systemd.restart(UNIT)  # the hand-written unit's server runs
    state = StateDir(root / "state" / "specd")

    imported = import_unit(unit, profiles, "imported")  # `specd import` of it
    assert KEY in imported.read_text()
    gate.failures.append(HealthError("the new server never answered"))
    with pytest.raises(SwitchFailed) as failed:  # a failed switch puts the hand-written unit back
        switcher(deployment, state, systemd, gate).switch("new")
    assert KEY not in str(failed.value) and KEY not in (failed.value.revert_state or "")
    assert unit.read_text() == HAND_WRITTEN and stat.S_IMODE(unit.stat().st_mode) == 0o600  # as it was
    switcher(deployment, state, systemd, gate).switch("new")  # and a good one backs it up
    assert [b.profile for b in list_backups(unit)] == ["unmanaged", "unmanaged"]

    history = History(state.db)
    told = [*(vars(g) for g in history.list(UNIT)), *(dict(e) for e in history.events(UNIT))]
    assert told and KEY not in repr(told)  # what `specd history` and the status page show
    holding = [path for path in root.rglob("*") if path.is_file() and KEY.encode() in path.read_bytes()]
    names = {path.name for path in holding}
    assert "imported.toml" in names and sum(".pre-" in name for name in names) == 2
    assert any(path.parent.parent == state.root / "units" for path in holding)  # the unit store: history's text
    exposed = [str(path) for path in holding if not others_kept_out(path, root)]
    assert exposed == []
    if os.geteuid() == 0:  # CI and this project's machines run as root; as a user, the modes above are the check
        control = unit.parent / "control-0644"
        control.write_text("readable\n")
        control.chmod(0o644)
        assert nobody_reads(control), "setpriv cannot read a 0644 file as nobody: the check below would be vacuous"
        assert [str(path) for path in holding if nobody_reads(path)] == []


def test_a_key_file_is_written_0600_and_a_file_keeps_its_mode(root: Path) -> None:
    plain, keyed = root / "plain", root / "keyed"
    atomic_write(plain, b"no secret\n")
    assert stat.S_IMODE(plain.stat().st_mode) == 0o644 & ~_umask()
    plain.chmod(0o640)
    atomic_write(plain, b"still no secret\n")
    assert stat.S_IMODE(plain.stat().st_mode) == 0o640  # replaced, with the mode it had
    keyed.with_name(f".{keyed.name}{TMP_INFIX}{os.getpid()}").write_text("a crash's leftover, 0644\n")
    atomic_write(keyed, f"ExecStart=/opt/llama-server --api-key={KEY}\n".encode(), mode=0o644)
    assert stat.S_IMODE(keyed.stat().st_mode) == 0o600  # asked for 0644; it holds a key


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


@pytest.mark.parametrize(("text", "secret"), [
    (f"ExecStart=/usr/bin/llama-server --api-key {KEY}", True),
    (f'Environment="LLAMA_ARG_API_KEY={KEY}"', True),
    (f'api_key = "{KEY}"', True),
    (f'args = ["--hf-token", "{KEY}"]', True),
    ("ExecStart=/usr/bin/llama-server --api-key-file /run/credentials/llama/key", False),
    ('api_key_file = "/etc/llama/keys"', False),
    ("Environment=LLAMA_ARG_API_KEY_FILE=/etc/llama/keys", False),
    ("ExecStart=/usr/bin/llama-server --port 8080", False),
])
def test_what_counts_as_a_key(text: str, secret: bool) -> None:
    assert holds_secret(text) is secret
    assert (KEY in mask(text)) is False


def test_show_masks_every_spelling_of_a_key() -> None:
    unit = (f"Environment=LLAMA_ARG_API_KEY={KEY}\nExecStart=/usr/bin/llama-server --api-key {KEY} "
            f"--hf-token={KEY} --port 8080\n")
    masked = mask(unit)
    assert KEY not in masked and "--port 8080" in masked and masked.count("…") == 3
    assert mask_argv(["llama-server", "--api-key", KEY, f"--hf-token={KEY}", "--port", "8080"]) == \
        ["llama-server", "--api-key", "…", "--hf-token=…", "--port", "8080"]
    profile = f'api_key = "{KEY}"\nenv = {{ LLAMA_ARG_API_KEY = "{KEY}" }}\nargs = ["--api-key", "{KEY}"]\n'
    assert KEY not in mask(profile)


def test_doctor_warns_of_a_key_others_can_read(root: Path) -> None:
    profiles = root / "profiles"
    profiles.mkdir()
    keyed = profiles / "keyed.toml"
    keyed.write_text(f'binary = "/opt/llama-server"\nmodel = "/m/x.gguf"\napi_key = "{KEY}"\n')
    keyed.chmod(0o644)
    key_file = root / "keys"
    key_file.write_text(f"{KEY}\n")
    key_file.chmod(0o604)
    (profiles / "by-file.toml").write_text(f'binary = "/opt/llama-server"\nmodel = "/m/x.gguf"\n'
                                           f'api_key_file = "{key_file}"\n')
    (profiles / "plain.toml").write_text('binary = "/opt/llama-server"\nmodel = "/m/x.gguf"\n')
    deployment = Deployment(UNIT, "user", profiles)
    finding = keys_readable(deployment)
    assert not finding.ok and str(keyed) in finding.detail and str(key_file) in finding.detail
    assert "plain.toml" not in finding.detail and finding.fix.startswith("chmod 600")
    keyed.chmod(0o600)
    key_file.chmod(0o600)
    assert keys_readable(deployment).ok
