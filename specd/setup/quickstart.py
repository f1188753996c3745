"""`specd quickstart`: the whole main job on the tiny model, end to end, on this box.

Builds (or finds) llama-server and the tiny Gemma model, writes a config and the tiny profiles,
then switches between two profiles through the health gate, asks the model a few prompts, shows
history and rolls back. The box is left usable:

- with a `systemd --user` manager, the demo unit is installed there and stays running;
- without one (containers, no systemd as PID 1), a private manager is started under
  $XDG_STATE_HOME/specd/quickstart-systemd and kept running; quickstart prints the two variables
  to export to reach it (also in env.sh there) and `specd quickstart --stop` ends it.

With --stop-after the demo server is stopped at the end; on a box without a user manager the private
manager is stopped too and a specd.toml that quickstart wrote is removed again (the box is as before).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import tomlkit

from specd import paths
from specd.context import switcher_for
from specd.deploy.switch import Switcher
from specd.errors import SpecdError
from specd.profiles.config import load_config
from specd.setup.sandbox import free_port, start_private_systemd

UNIT = "llama-server-tiny.service"
ALIAS = "tiny"
MODEL_NOTE = ("the demo model, Gemma 3 270M Q4_K_M, is a base model (not instruction-tuned, no chat template): "
              "it continues text, so the demo asks it through /v1/completions; chat requests give junk")
EXPORTED = ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS")

Say = Callable[[str], None]


@dataclass(frozen=True)
class DemoPrompt:
    prompt: str
    max_tokens: int
    stop: tuple[str, ...]


DEMO_PROMPTS = (
    DemoPrompt("The capital of France is", 12, ("\n",)),
    DemoPrompt("Water boils at a temperature of", 12, ("\n",)),
    DemoPrompt('def add(a, b):\n    """Return the sum of a and b."""\n', 24, ("\n\n", "\ndef ")),
)


@dataclass(frozen=True)
class Answer:
    prompt: str
    text: str
    tokens: int
    tokens_per_s: float | None
    drafted: int | None
    accepted: int | None

    def summary(self) -> str:
        rate = f" at {self.tokens_per_s:.1f} tok/s" if self.tokens_per_s else ""
        draft = f", drafted {self.drafted}, accepted {self.accepted}" if self.drafted else ""
        return f"{self.tokens} tokens{rate}{draft}"


def run_script(name: str, say: Say) -> Path:
    script = paths.shipped("scripts", name)
    say(f"$ bash {script}")
    result = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise SpecdError(f"{script.name} failed with exit status {result.returncode} (its messages are above)")
    return Path(result.stdout.strip().splitlines()[-1])


def user_manager_answers() -> bool:
    if not os.environ.get("XDG_RUNTIME_DIR") and not os.environ.get("DBUS_SESSION_BUS_ADDRESS"):
        return False
    result = subprocess.run(["systemctl", "--user", "is-system-running"], capture_output=True, text=True,
                            check=False)
    return result.stdout.strip() in ("running", "degraded")


def ask(port: int, item: DemoPrompt) -> Answer:
    """Ask the way a base model answers: plain text completion, greedy."""
    body = {"model": ALIAS, "prompt": item.prompt, "max_tokens": item.max_tokens, "temperature": 0, "seed": 42,
            "stop": list(item.stop)}
    response = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=120)
    response.raise_for_status()
    data = response.json()
    timings = data.get("timings") or {}
    return Answer(
        prompt=item.prompt,
        text=str(data["choices"][0]["text"]),
        tokens=int(timings.get("predicted_n") or data.get("usage", {}).get("completion_tokens") or 0),
        tokens_per_s=timings.get("predicted_per_second"),
        drafted=timings.get("draft_n"),
        accepted=timings.get("draft_n_accepted"),
    )


def show_answer(say: Say, answer: Answer) -> None:
    prompt_lines = answer.prompt.rstrip("\n").splitlines()
    say(f"  prompt: {prompt_lines[0]}")
    for line in prompt_lines[1:]:
        say(f"          {line}")
    answer_lines = answer.text.rstrip().splitlines() or [""]
    say(f"  answer: {answer_lines[0]}")
    for line in answer_lines[1:]:
        say(f"          {line}")
    say(f"          ({answer.summary()})")


# --- where the demo runs ------------------------------------------------------------------------------

def private_root() -> Path:
    return paths.StateDir.from_environment().quickstart_manager


def _record_path() -> Path:
    return private_root() / "manager.json"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def private_manager_running() -> bool:
    """Whether the private manager an earlier quickstart left running is still up."""
    try:
        record = json.loads(_record_path().read_text())
        return _pid_alive(int(record["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        return False


def start_private_manager(say: Say) -> dict[str, str]:
    """A private manager that outlives quickstart; returns the variables that reach it."""
    stop_private_manager(say, quiet=True)
    root = private_root()
    manager = start_private_systemd(root, home=Path.home())
    exports = {key: manager.env[key] for key in EXPORTED}
    record = {"pid": manager.process.pid, "exports": exports, "cgroups": [str(c) for c in manager.cgroups]}
    root.mkdir(parents=True, exist_ok=True)
    _record_path().write_text(json.dumps(record, indent=2) + "\n")
    (root / "env.sh").write_text("".join(f"export {key}={value}\n" for key, value in exports.items()))
    os.environ.update(exports)
    return exports


def stop_private_manager(say: Say, *, quiet: bool = False) -> bool:
    """End the manager quickstart left running (its units stop with it) and remove its directory."""
    record_path = _record_path()
    if not record_path.exists():
        if not quiet:
            say("no private systemd from quickstart is running")
        return False
    record = json.loads(record_path.read_text())
    pid = int(record["pid"])
    if _pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while _pid_alive(pid) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.2)
        if _pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
            _reap(pid)
    for cgroup in map(Path, record.get("cgroups", [])):
        for directory in sorted((p for p in cgroup.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            _rmdir_quietly(directory)
        _rmdir_quietly(cgroup)
    shutil.rmtree(private_root(), ignore_errors=True)
    runtime = Path(record.get("exports", {}).get("XDG_RUNTIME_DIR", ""))
    if runtime.name.startswith("specd-run-"):  # a short socket dir the sandbox made under /tmp
        shutil.rmtree(runtime, ignore_errors=True)
    if not quiet:
        say(f"stopped the private systemd (pid {pid}) and the demo server with it; removed {private_root()}")
    return True


def stop_demo(say: Say) -> None:
    """`specd quickstart --stop`: end the private manager and remove a specd.toml that only points at it."""
    stopped = stop_private_manager(say)
    main = paths.default_config_path()
    demo = main.with_name("quickstart.toml")
    if stopped and main.exists() and demo.exists() and main.read_text() == demo.read_text():
        main.unlink()
        say(f"removed {main}: it pointed at the demo unit under that manager ({demo} is kept)")


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return


def _rmdir_quietly(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError:
        return


# --- config -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DemoConfig:
    path: Path
    main_written: Path | None  # specd.toml, when quickstart wrote it (there was none)


def demo_threads(cores: int) -> int:
    """Half the cores this process may use (at least 1): two demo servers then fit side by side, so
    `specd switch --strategy blue-green` works on the demo profiles (specd.deploy.capacity refuses
    two thread pools that would share cores)."""
    return max(1, cores // 2)


def write_demo_config(port: int, threads: int) -> DemoConfig:
    root = paths.config_home() / "specd"
    profiles_dir = root / "profiles" / "tiny"
    profiles_dir.mkdir(parents=True, exist_ok=True)
    for source in sorted(paths.shipped("profiles", "tiny").glob("*.toml")):
        document = tomlkit.parse(source.read_text())
        if "port" in document:
            document["port"] = port
        if "threads" in document:
            document["threads"] = threads
        (profiles_dir / source.name).write_text(tomlkit.dumps(document))
    config = root / "quickstart.toml"
    config.write_text(
        "# Written by `specd quickstart`.\n"
        f'unit = "{UNIT}"\nscope = "user"\nprofiles_dir = "{profiles_dir}"\n'
    )
    main = paths.default_config_path()
    if main.exists():
        return DemoConfig(config, None)
    shutil.copyfile(config, main)
    return DemoConfig(config, main)


# --- the demo -----------------------------------------------------------------------------------------

def run_demo(say: Say, config: DemoConfig, port: int) -> Switcher:
    deployment = load_config(config.path).deployment()
    switcher = switcher_for(deployment, trigger="cli")
    say(MODEL_NOTE)
    for name in ("autoregressive", "ngram-simple"):
        say(f"$ specd switch {name}")
        outcome = switcher.switch(name)
        load = outcome.health.load_s if outcome.health else 0.0
        say(f"  healthy in {outcome.generation.total_s or 0:.1f} s (server load {load:.1f} s)")
        for item in DEMO_PROMPTS:
            show_answer(say, ask(port, item))
    say("$ specd history")
    for gen in reversed(switcher.history.list(deployment.unit, 5)):
        say(f"  gen {gen.id}: {gen.kind} {gen.profile} [{gen.trigger}] {gen.outcome}")
    say("$ specd rollback")
    outcome = switcher.rollback()
    say(f"  back on {outcome.generation.profile} (generation {outcome.generation.id}, "
        f"{outcome.generation.total_s or 0:.1f} s)")
    say(f"$ specd status -> active profile {switcher.active_profile()}")
    return switcher


def run_quickstart(say: Say, keep_running: bool) -> None:
    started = time.monotonic()
    run_script("build-llama-server.sh", say)
    run_script("get-test-model.sh", say)
    private = not user_manager_answers()
    exports: dict[str, str] = {}
    if private:
        say("no systemd --user manager answers here (systemd is not PID 1 on this box, or no login session): "
            f"starting a private one under {private_root()}")
        exports = start_private_manager(say)
    else:
        say("using your systemd --user manager")
    port = free_port()
    threads = demo_threads(len(os.sched_getaffinity(0)))
    config = write_demo_config(port, threads)
    settings = f"unit {UNIT}, alias '{ALIAS}', port {port}, {threads} thread{'s' if threads > 1 else ''} per server"
    if config.main_written:
        say(f"wrote {config.main_written} ({settings}) and {config.path}")
    else:
        say(f"wrote {config.path} ({settings}); your {paths.default_config_path()} is left as it was")
        exports["SPECD_CONFIG"] = str(config.path)
        os.environ["SPECD_CONFIG"] = str(config.path)
    try:
        switcher = run_demo(say, config, port)
    except BaseException:
        if private:
            stop_private_manager(say)
        raise
    if not keep_running:
        switcher.systemd.stop(UNIT)
        say(f"stopped {UNIT}")
        if private:
            stop_private_manager(say)
            if config.main_written:
                config.main_written.unlink(missing_ok=True)
                say(f"removed {config.main_written} again: without a user manager it would point at nothing")
    say(f"quickstart done in {time.monotonic() - started:.0f} s")
    say_next_steps(say, private=private, keep_running=keep_running, exports=exports, port=port)


def say_next_steps(say: Say, *, private: bool, keep_running: bool, exports: dict[str, str], port: int) -> None:
    if private and not keep_running:
        say("this box has no systemd --user manager, so nothing is left running. "
            "Run `specd quickstart` without --stop-after to keep a private one, "
            "or use specd where systemd runs as PID 1.")
        return
    if private:
        say("this box has no systemd --user manager: the demo runs under a private one that stays up until "
            "`specd quickstart --stop` (or a reboot). It is not started at boot, and units under it are not "
            "in the journal. To reach it from another shell:")
        say(f"  source {private_root() / 'env.sh'}")
    if exports:
        for key, value in exports.items():
            say(f"  export {key}={value}")
    say(f"next: `specd status`, `specd profiles`, `specd history`, `specd switch ngram-mod`; the server answers "
        f"on http://127.0.0.1:{port} as alias '{ALIAS}' (/v1/completions: it is a base model)")
