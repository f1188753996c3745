"""Who may act through the status page: one token, sessions, and CSRF protection.

Reading the page needs nothing (bind it to loopback, the default, or behind your own proxy).
Actions need the token: a random secret in a 0600 file, created on first start under the state
directory (or `[daemon] http_token_file`), printed by `specd web-token`. The browser trades it once
for a session cookie (HttpOnly, SameSite=Strict) plus a CSRF token that every action must echo
in `X-CSRF-Token`; an action must also be JSON and, when the browser names an Origin, come from
the page's own origin. A daemon bound beyond loopback without a token file configured refuses to
start: an address other machines reach must not get a token nobody chose to set up.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from specd import paths
from specd.daemon.service import is_loopback
from specd.errors import ConfigError
from specd.profiles.config import Config

SESSION_COOKIE = "specd_session"
CSRF_HEADER = "x-csrf-token"
SESSION_TTL_S = 12 * 3600.0
TOKEN_BYTES = 32


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


def token_path(config: Config) -> Path:
    return config.daemon.http_token_file or paths.StateDir.from_environment().web_token


def check_exposure(config: Config) -> None:
    """Refuse a status page reachable from other machines unless a token file was configured."""
    listen = config.daemon.http_listen
    if not listen:
        return
    host, _ = split_listen(listen)
    if not is_loopback(host) and config.daemon.http_token_file is None:
        raise ConfigError(
            f"{config.path}: [daemon] http_listen {listen} is reachable from other machines, and no "
            "[daemon] http_token_file is set: the daemon refuses to start",
            hint="set http_token_file = \"/path/to/web-token\" (created 0600 if missing; `specd web-token` "
                 "prints it), or listen on 127.0.0.1")


def read_or_create_token(path: Path) -> str:
    """The token in `path`; a new random one written 0600 when the file does not exist.
    A token file others can read is refused (it would be a password in a shared file)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(TOKEN_BYTES) + "\n")
    try:
        mode = path.stat().st_mode
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the web token: {exc.strerror}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path}: the web token file is readable by other users (mode {stat.filemode(mode)})",
                          hint=f"chmod 600 {path}")
    if len(token) < 16:
        raise ConfigError(f"{path}: the web token is empty or shorter than 16 characters",
                          hint="delete the file: the daemon writes a new random one")
    return token


@dataclass(frozen=True)
class Session:
    csrf: str
    expires_at: float


class Sessions:
    """Sessions in memory: a daemon restart logs everyone out (the page logs in again)."""

    def __init__(self, token: str, *, ttl_s: float = SESSION_TTL_S) -> None:
        self._token = token
        self._ttl_s = ttl_s
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def login(self, offered: str) -> tuple[str, Session] | None:
        if not hmac.compare_digest(offered.strip().encode(), self._token.encode()):
            return None
        session_id = secrets.token_urlsafe(TOKEN_BYTES)
        session = Session(secrets.token_urlsafe(TOKEN_BYTES), time.time() + self._ttl_s)
        with self._lock:
            now = time.time()
            self._sessions = {k: v for k, v in self._sessions.items() if v.expires_at > now}
            self._sessions[session_id] = session
        return session_id, session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        with self._lock:
            session = self._sessions.get(session_id)
        return session if session is not None and session.expires_at > time.time() else None

    def logout(self, session_id: str | None) -> None:
        with self._lock:
            self._sessions.pop(session_id or "", None)

    def authorize(self, session_id: str | None, csrf: str | None) -> str | None:
        """None when the request may act; else why not (shown to the user)."""
        session = self.get(session_id)
        if session is None:
            return "read-only: log in with the token from `specd web-token` to act"
        if not csrf or not hmac.compare_digest(csrf.encode(), session.csrf.encode()):
            return "refused: the CSRF token is missing or wrong (reload the page)"
        return None
