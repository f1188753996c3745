"""File watching for the daemon: profiles as they are edited, and the unit file behind specd's back.

- A profile edit is validated at once and its errors reported (journal, history events, status,
  metrics); nothing is ever applied from here — only a switch applies a profile.
- A unit file of the slot that serves (specd.deploy.slots) whose text is not what specd's newest
  generation installed was edited by hand:
  it is stored and recorded as a generation ("external edit"), so `specd rollback` still walks
  back over hand edits. specd's own writes happen under the deployment lock and end with a
  matching generation, so a change seen while the lock is busy is looked at again afterwards.

Events are debounced (editors write a file in several steps) and handled off watchdog's thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from specd.deploy.history import History
from specd.deploy.seams import Seams
from specd.deploy.slots import slots_of
from specd.deploy.switch import Switcher
from specd.deploy.unitfiles import read_text, sha256_text
from specd.errors import LockBusy
from specd.profiles.load import list_profiles

log = logging.getLogger(__name__)

DEBOUNCE_S = 0.3
RETRY_S = 2.0
EXTERNAL_EDIT = "external-edit"


def expected_unit_sha(history: History, unit: str) -> str | None:
    """The sha256 of the unit text specd last installed (or recorded) for `unit`: the active
    generation's own (a rollback that moved the server to another port installed its own text)."""
    active = history.active(unit)
    if active is None:
        return None
    if active.unit_sha256 is not None:
        return active.unit_sha256
    content = history.get(active.content_id) or active
    return content.unit_sha256


def record_external_edit(seams: Seams) -> int | None:
    """Record a hand-edited unit as a generation; None when the file is what specd installed."""
    generation = Switcher(seams, trigger="daemon").record_external_edit()
    return generation.id if generation is not None else None


class _Debounced(FileSystemEventHandler):
    def __init__(self, wanted: Callable[[Path], bool], fire: Callable[[], object]) -> None:
        self._wanted, self._fire = wanted, fire
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type in ("opened", "closed_no_write"):
            return
        touched = [event.src_path, getattr(event, "dest_path", "")]
        if not any(p and self._wanted(Path(str(p))) for p in touched):
            return
        self.schedule(DEBOUNCE_S)

    def schedule(self, delay_s: float) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(delay_s, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def cancel(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()


class DeploymentWatcher:
    """Watches one deployment's profiles directory and unit file, over seams of its own (its
    checks run on watchdog's and timer threads, never the daemon's event loop)."""

    def __init__(self, seams: Seams, *,
                 on_profile_errors: Callable[[dict[str, str]], None] = lambda errors: None,
                 on_external_edit: Callable[[int], None] = lambda generation_id: None) -> None:
        self.seams = seams
        self.deployment = deployment = seams.deployment
        self.profile_errors: dict[str, str] = {}
        self._on_profile_errors, self._on_external_edit = on_profile_errors, on_external_edit
        self._history = seams.history
        self._serial = threading.Lock()
        self._observer = Observer()
        self._profiles = _Debounced(lambda p: p.suffix == ".toml", self.check_profiles)
        slot_paths = {each.unit_path for each in slots_of(deployment)}
        self._unit = _Debounced(lambda p: p in slot_paths, self.check_unit)

    def start(self) -> None:
        self.deployment.unit_dir.mkdir(parents=True, exist_ok=True)
        self._observer.schedule(self._unit, str(self.deployment.unit_dir), recursive=False)
        if self.deployment.profiles_dir.is_dir():
            self._observer.schedule(self._profiles, str(self.deployment.profiles_dir), recursive=False)
        else:
            log.error("%s: profiles directory %s does not exist", self.deployment.unit, self.deployment.profiles_dir)
        self._observer.start()
        self.check_profiles()
        self.check_unit()

    def stop(self) -> None:
        self._profiles.cancel()
        self._unit.cancel()
        self._observer.stop()
        self._observer.join(5)
        with self._serial:
            self._history.close()

    def check_profiles(self) -> dict[str, str]:
        """Validate every profile; report errors that are new and profiles that became valid."""
        with self._serial:
            if not self.deployment.profiles_dir.is_dir():
                return self.profile_errors
            errors = {p.name: p.error for p in list_profiles(self.deployment.profiles_dir) if p.error}
            unit = self.deployment.unit
            for name, error in sorted(errors.items()):
                if self.profile_errors.get(name) != error:
                    log.error("%s: profile %s is invalid (not applied): %s", unit, name, error)
                    self._history.event(unit, "profile-invalid", f"{name}: {error}")
            for name in sorted(set(self.profile_errors) - set(errors)):
                log.info("%s: profile %s is valid again", unit, name)
                self._history.event(unit, "profile-valid", name)
            self.profile_errors = errors
        self._on_profile_errors(errors)
        return errors

    def check_unit(self) -> int | None:
        """Record a hand edit of the unit file as a generation; retried while a switch holds the lock."""
        with self._serial:
            text = read_text(self.seams.serving().unit_path)
            if text is None or sha256_text(text) == expected_unit_sha(self._history, self.deployment.unit):
                return None
            try:
                generation_id = record_external_edit(self.seams)
            except LockBusy:
                self._unit.schedule(RETRY_S)
                return None
            if generation_id is not None:
                self._history.event(self.deployment.unit, EXTERNAL_EDIT, f"generation {generation_id}")
        if generation_id is not None:
            log.warning("%s: the unit file was edited outside specd; recorded as generation %d (rollback "
                        "returns to the previous one)", self.deployment.unit, generation_id)
            self._on_external_edit(generation_id)
        return generation_id
