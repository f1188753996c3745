"""`specd quickstart`: the whole main job on the tiny model, end to end, on this box.

Builds (or finds) llama-server and the tiny Gemma model, writes a config and the tiny profiles,
then switches between two profiles through the health gate, shows status and history, and
rolls back. Uses the user's systemd when it answers, else a private one for the demo.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import tomlkit

from specd import paths
from specd.profiles.config import Deployment, load_config
from specd.errors import SpecdError
from specd.setup.sandbox import PrivateSystemd, free_port, private_systemd_env
from specd.context import switcher_for

UNIT = "llama-server-tiny.service"


def run_script(name: str, say: Callable[[str], None]) -> Path:
    script = paths.shipped("scripts", name)
    say(f"$ bash {script}")
    result = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise SpecdError(f"{script.name} failed with exit status {result.returncode}")
    return Path(result.stdout.strip().splitlines()[-1])


def user_manager_answers() -> bool:
    if not os.environ.get("XDG_RUNTIME_DIR") and not os.environ.get("DBUS_SESSION_BUS_ADDRESS"):
        return False
    result = subprocess.run(["systemctl", "--user", "is-system-running"], capture_output=True, text=True,
                            check=False)
    return result.stdout.strip() in ("running", "degraded")


@contextmanager
def systemd_for_demo(say: Callable[[str], None]) -> Iterator[PrivateSystemd | None]:
    if user_manager_answers():
        say("using your systemd --user manager")
        yield None
        return
    say("no systemd --user manager answers here: starting a private one for this demo")
    with private_systemd_env(home=Path.home()) as manager:
        yield manager


def write_demo_config(port: int) -> Path:
    root = paths.config_home() / "specd"
    profiles_dir = root / "profiles" / "tiny"
    profiles_dir.mkdir(parents=True, exist_ok=True)
    for source in sorted(paths.shipped("profiles", "tiny").glob("*.toml")):
        document = tomlkit.parse(source.read_text())
        if "port" in document:
            document["port"] = port
        (profiles_dir / source.name).write_text(tomlkit.dumps(document))
    config = root / "quickstart.toml"
    config.write_text(
        "# Written by `specd quickstart`.\n"
        f'unit = "{UNIT}"\nscope = "user"\nprofiles_dir = "{profiles_dir}"\n'
    )
    main = paths.default_config_path()
    if not main.exists():
        shutil.copyfile(config, main)
    return config


def ask(deployment: Deployment, alias: str, port: int, prompt: str) -> str:
    body = {"model": alias, "messages": [{"role": "user", "content": prompt}], "max_tokens": 96, "temperature": 0,
            "seed": 42}
    response = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=120)
    response.raise_for_status()
    timings = response.json().get("timings", {})
    rate = timings.get("predicted_per_second")
    draft = timings.get("draft_n")
    extra = f", drafted {draft}, accepted {timings.get('draft_n_accepted')}" if draft else ""
    return f"{timings.get('predicted_n', '?')} tokens at {rate:.1f} tok/s{extra}" if rate else "answered"


def run_quickstart(say: Callable[[str], None], keep_running: bool) -> None:
    started = time.monotonic()
    run_script("build-llama-server.sh", say)
    run_script("get-test-model.sh", say)
    with systemd_for_demo(say) as manager:
        port = free_port()
        config_path = write_demo_config(port)
        say(f"config: {config_path} (unit {UNIT}, alias 'tiny', port {port})")
        deployment = load_config(config_path).deployment()
        switcher = switcher_for(deployment, trigger="cli")
        prompt = "Repeat exactly: def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n"
        for name in ("autoregressive", "ngram-simple"):
            say(f"$ specd switch {name}")
            outcome = switcher.switch(name)
            gen = outcome.generation
            say(f"  healthy in {gen.total_s or 0:.1f} s (server load {outcome.health.load_s if outcome.health else 0:.1f} s)"
                f" — {ask(deployment, 'tiny', port, prompt)}")
        say("$ specd history")
        for gen in reversed(switcher.history.list(deployment.unit, 5)):
            say(f"  gen {gen.id}: {gen.kind} {gen.profile} [{gen.trigger}] {gen.outcome}")
        say("$ specd rollback")
        outcome = switcher.rollback()
        say(f"  back on {outcome.generation.profile} (generation {outcome.generation.id}, "
            f"{outcome.generation.total_s or 0:.1f} s)")
        say(f"$ specd status → active profile {switcher.active_profile()}")
        if manager is not None:
            say("stopping the private systemd (and the demo server with it)")
        elif not keep_running:
            switcher.systemd.stop(deployment.unit)
    say(f"quickstart done in {time.monotonic() - started:.0f} s")
