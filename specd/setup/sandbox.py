"""A private `systemd --user` manager on its own D-Bus, for tests and `specd quickstart`.

Used where no user manager is reachable (containers, CI, root without a login session).

Recipe from shared/notes/systemd.md: /run/systemd/system must exist, XDG_RUNTIME_DIR is a
private 0700 dir, HOME/XDG_CONFIG_HOME point at a temp dir so no real user's units are touched.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from specd import paths
from specd.errors import SystemdError

SYSTEMD = Path("/lib/systemd/systemd")


@dataclass
class PrivateSystemd:
    root: Path
    process: subprocess.Popen[bytes]
    env: dict[str, str]
    cgroups: list[Path]

    @property
    def unit_dir(self) -> Path:
        return Path(self.env["XDG_CONFIG_HOME"]) / "systemd" / "user"

    def log(self) -> str:
        try:
            return (Path(self.env["XDG_RUNTIME_DIR"]) / "systemd.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for cgroup in self.cgroups:
            for directory in sorted((p for p in cgroup.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                _rmdir_quietly(directory)
            _rmdir_quietly(cgroup)


def _rmdir_quietly(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError:
        return


def _own_cgroups(name: str) -> list[Path]:
    """A cgroup subtree of its own for the manager, where the container lets us make one.

    On cgroup-v1 containers a user manager started from init.scope takes "/" as its root, so two
    private managers would share /app.slice/<unit> cgroups — and stopping a unit in one (say the
    D-Bus daemon) would kill the other's processes. Each manager gets /specd-<name> instead.
    """
    created: list[Path] = []
    for hierarchy in (Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified")):
        target = hierarchy / f"specd-{name}"
        try:
            target.mkdir(exist_ok=True)
        except OSError:
            continue
        created.append(target)
    return created


def _xdg(name: str, default: Path, keep: bool) -> str:
    value = os.environ.get(name, "") if keep else ""
    return value or str(default)


def _sockets_fit(runtime: Path) -> bool:
    """AF_UNIX socket paths hold ~107 bytes: systemd's deepest one must fit, with room to spare."""
    return len(str(runtime / "systemd" / "inaccessible" / "private")) <= 100


def runtime_dir(base: Path) -> Path:
    """The manager's XDG_RUNTIME_DIR: under `base` when its sockets' paths fit; else a new directory in
    $TMPDIR, else in /tmp (a deep $TMPDIR too would make systemd exit without a word)."""
    if _sockets_fit(base / "runtime"):
        return base / "runtime"
    for parent in (None, "/tmp"):
        candidate = Path(tempfile.mkdtemp(prefix="specd-run-", dir=parent))
        if _sockets_fit(candidate):
            return candidate
        candidate.rmdir()
    raise SystemdError(f"no directory with paths short enough for systemd's sockets: {base} and /tmp are too deep")


def start_private_systemd(root: Path | None = None, timeout_s: float = 30.0, *,
                          home: Path | None = None) -> PrivateSystemd:
    """Start a manager whose HOME/XDG_* live under `root` (or keep `home` as HOME, for quickstart)."""
    if not SYSTEMD.exists():
        raise SystemdError(f"{SYSTEMD} is missing: install systemd")
    Path("/run/systemd/system").mkdir(parents=True, exist_ok=True)
    base = root or Path(tempfile.mkdtemp(prefix="specd-systemd-"))
    runtime = runtime_dir(base)
    keep_xdg = home is not None
    home = home or base / "home"
    runtime.mkdir(parents=True, exist_ok=True)
    runtime.chmod(0o700)
    home.mkdir(parents=True, exist_ok=True)
    real_cache = str(paths.cache_dir())
    env = {
        **os.environ,
        "XDG_RUNTIME_DIR": str(runtime),
        "HOME": str(home),
        "XDG_CONFIG_HOME": _xdg("XDG_CONFIG_HOME", home / ".config", keep_xdg),
        "XDG_STATE_HOME": _xdg("XDG_STATE_HOME", home / ".local" / "state", keep_xdg),
        "XDG_CACHE_HOME": _xdg("XDG_CACHE_HOME", home / ".cache", keep_xdg),
        "SPECD_CACHE": real_cache,
        "DBUS_SESSION_BUS_ADDRESS": f"unix:path={runtime}/bus",
    }
    cgroups = _own_cgroups(f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
    with open(runtime / "systemd.log", "wb") as log:
        targets = " ".join(shlex.quote(str(cgroup / "cgroup.procs")) for cgroup in cgroups)
        enter_then_exec = f'for f in {targets}; do echo $$ > "$f" 2>/dev/null; done; exec {SYSTEMD} --user'
        process = subprocess.Popen(
            ["/bin/sh", "-c", enter_then_exec], env=env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
    manager = PrivateSystemd(base, process, env, cgroups)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemdError(f"systemd --user exited with {process.returncode}:\n{manager.log()}")
        state = subprocess.run(["systemctl", "--user", "is-system-running"], env=env, capture_output=True, text=True,
                               check=False)
        if state.stdout.strip() in ("running", "degraded"):
            return manager
        time.sleep(0.2)
    manager.stop()
    raise SystemdError(f"systemd --user did not come up in {timeout_s} s:\n{manager.log()}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def private_systemd_env(root: Path | None = None, *, home: Path | None = None) -> Iterator[PrivateSystemd]:
    """Start a private manager and point this process's environment at it until the block ends."""
    manager = start_private_systemd(root, home=home)
    saved = dict(os.environ)
    os.environ.update(manager.env)
    try:
        yield manager
    finally:
        manager.stop()
        os.environ.clear()
        os.environ.update(saved)
