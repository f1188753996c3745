"""`specd doctor`: what is missing on this box, and the command that fixes each thing."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from specd import paths
from specd.durable import mode_of
from specd.errors import SpecdError
from specd.profiles.config import Deployment, load_config
from specd.profiles.load import Profile, list_profiles, load_profile
from specd.secrets import holds_secret, readable_by_others


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool
    detail: str
    fix: str = ""


def _bindings() -> Finding:
    try:
        import gi  # noqa: F401
        import pydbus  # noqa: F401
    except ImportError as exc:
        return Finding("D-Bus bindings", False, str(exc),
                       "apt-get install libgirepository1.0-dev libcairo2-dev pkg-config; pip install 'PyGObject<3.51'")
    return Finding("D-Bus bindings", True, "pydbus and PyGObject import")


def _systemd(scope: str) -> Finding:
    from specd.deploy.systemd import connect_systemd

    try:
        connect_systemd(scope)
    except SpecdError as exc:
        fix = "log in through a session, or `loginctl enable-linger $USER`" if scope == "user" else "run as root"
        return Finding(f"systemd ({scope})", False, exc.message, fix)
    return Finding(f"systemd ({scope})", True, "the manager answers on D-Bus")


def _linger() -> Finding:
    if not shutil.which("loginctl"):
        return Finding("linger", True, "loginctl not installed; skipped")
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=False).stdout.strip()
    result = subprocess.run(["loginctl", "show-user", user, "-p", "Linger"], capture_output=True, text=True,
                            check=False)
    if "Linger=yes" in result.stdout:
        return Finding("linger", True, f"user {user} lingers: the user manager survives logout")
    return Finding("linger", False, "the user manager (and llama-server) stops when you log out",
                   f"sudo loginctl enable-linger {user}")


def _cache() -> list[Finding]:
    binary = paths.cache_dir() / "llama-server" / "0.3.36-cpu" / "build" / "bin" / "llama-server"
    model = paths.cache_dir() / "models" / "gemma-3-270m-q4_k_m.gguf"
    return [
        Finding("tiny llama-server build", binary.exists(), str(binary), "scripts/build-llama-server.sh"),
        Finding("tiny test model", model.exists(), str(model), "scripts/get-test-model.sh"),
    ]


def _gpu() -> Finding:
    from specd.gpu import nvml as gpu

    state = gpu.probe_gpus()
    if isinstance(state, gpu.NoGpu):
        return Finding("NVIDIA GPU", True, f"none ({state.reason}); VRAM checks are skipped")
    return Finding("NVIDIA GPU", True, state.describe())


def _profiles(config_path: Path | None) -> list[Finding]:
    from specd.context import main_pid_of, seams_for
    from specd.deploy.preflight import run_preflight
    from specd.tune.activity import profile_problems

    try:
        config = load_config(config_path)
    except SpecdError as exc:
        return [Finding("config", False, exc.message, exc.hint or "")]
    findings = [Finding("config", True, str(config.path))]
    for deployment in config.deployments:
        findings.append(_systemd(deployment.scope))
        findings.append(keys_readable(deployment))
        if not deployment.profiles_dir.is_dir():
            findings.append(Finding(f"{deployment.unit} profiles", False,
                                    f"{deployment.profiles_dir} is not a directory",
                                    "create it and put profile files in it (see profiles/ in the repo)"))
            continue
        main_pid = main_pid_of(seams_for(deployment))
        for item in list_profiles(deployment.profiles_dir):
            label = f"profile {item.name}"
            if item.abstract:
                continue
            if item.error:
                findings.append(Finding(label, False, item.error, "fix the file"))
                continue
            profile = load_profile(deployment.profiles_dir, item.name)
            try:
                pre = run_preflight(deployment, item.name, current_main_pid=main_pid)
                seen = profile_problems(deployment, item.name)
                ready = ("ready to switch to" + (vllm_environment(profile) if profile.engine == "vllm" else "")
                         + (f"; VRAM: {pre.vram}" if pre.vram and profile.engine != "vllm" else ""))
                findings.append(Finding(label, not seen, "; ".join(seen) or ready,
                                        _SPECULATION_FIX if seen else ""))
            except SpecdError as exc:
                fix = exc.hint or (_vllm_fix(exc.message) if profile.engine == "vllm" else
                                   _fix_for(exc.message, engine_of(str(profile.binary), profile.speculative.type)))
                findings.append(Finding(label, False, exc.message, fix))
    return findings


def _files_with_keys(deployment: Deployment) -> list[Path]:
    """The files of a deployment that hold a key: profiles and units (with their `.pre-*` backups)
    that name one, and every key file a profile points at (`api_key_file`)."""
    from specd.deploy.slots import slots_of

    candidates = sorted(deployment.profiles_dir.glob("*.toml"))
    for each in slots_of(deployment):
        candidates += [each.unit_path, *sorted(each.unit_path.parent.glob(f"{each.unit_path.name}.pre-*"))]
    found = []
    for path in candidates:
        try:
            if holds_secret(path.read_bytes()):
                found.append(path)
        except OSError:
            continue
    for profile in sorted(deployment.profiles_dir.glob("*.toml")):  # read as written: a bad profile may hold one too
        try:
            key_file = tomllib.loads(profile.read_text(encoding="utf-8")).get("api_key_file")
        except (OSError, ValueError):
            continue
        if isinstance(key_file, str) and Path(key_file).is_file():
            found.append(Path(key_file))
    return found


def keys_readable(deployment: Deployment) -> Finding:
    """A key others can read: in a profile or unit, a backup of one, or a key file."""
    exposed = [path for path in _files_with_keys(deployment) if readable_by_others(mode_of(path))]
    label = f"{deployment.unit} keys"
    if not exposed:
        return Finding(label, True, "no file that holds an API key is readable by other users")
    listed = ", ".join(f"{path} (mode {mode_of(path):04o})" for path in exposed)
    return Finding(label, False, f"other users can read an API key in {listed}",
                   "chmod 600 " + " ".join(str(path) for path in exposed)
                   + "; or keep the key in a 0600 file and name it with api_key_file")


_SPECULATION_FIX = ("its last bench saw speculation not doing what the profile says: pick another speculative type or "
                    "build for this model (the tuner leaves an inactive one out), or, for type = \"none\" on a binary "
                    "that speculates by default, `specd switch` it again so the flag that turns speculation off "
                    "is rendered")


Engine = Literal["beellama", "ik_llama", "llama.cpp"]


def engine_of(binary: str, spec_type: str) -> Engine:
    """Which llama-server a profile means, from its binary's path and its speculative type: DFlash
    comes from the BeeLlama fork, ik_llama.cpp names itself, anything else is vanilla llama.cpp."""
    lowered = binary.lower()
    if "beellama" in lowered or spec_type.split(",")[0].split(":")[0] in ("dflash", "draft-dflash"):
        return "beellama"
    if "ik_llama" in lowered or "ik-llama" in lowered:
        return "ik_llama"
    return "llama.cpp"


_BUILD = {
    "llama.cpp": "build it: scripts/build-llama-server.sh (vanilla llama.cpp, pinned), or fix `binary`",
    "beellama": "this profile needs the BeeLlama fork (DFlash): build github.com/Anbeeld/beellama.cpp "
                "(cmake -B build && cmake --build build --target llama-server), or fix `binary`; "
                "scripts/build-llama-server.sh builds vanilla llama.cpp, which has no DFlash",
    "ik_llama": "this profile needs ik_llama.cpp: build github.com/ikawrakow/ik_llama.cpp, or fix `binary`",
}


def _fix_for(message: str, engine: Engine) -> str:
    if "no such binary" in message:
        return _BUILD[engine]
    if "no such model file" in message or "no such file" in message:
        return "download the GGUF (see the profile's comments) or fix `model` / `draft_model`"
    if "not offered by" in message:
        return "this build's --spec-type lacks it (too old, or another fork): " + _BUILD[engine]
    if "port" in message:
        return "stop what holds the port or change `port`"
    return ""


def run_doctor(config_path: Path | None) -> list[Finding]:
    return [_bindings(), *_cache(), _gpu(), _linger(), *_profiles(config_path)]


def vllm_environment(profile: Profile) -> str:
    """What doctor says of a vLLM profile's environment once preflight passed (the answers are cached)."""
    from specd.engines.vllm_flags import vllm_flags

    flags = vllm_flags(profile.binary, profile.launcher)
    offered = flags.speculative_methods
    known = [m for m in ("mtp", "eagle3", "dflash", "draft_model", "ngram", "suffix") if m in offered]
    methods = f"{len(offered)} speculative methods ({', '.join(known)} among them)" if offered else \
        "speculative methods not listed (vLLM judges them at start)"
    keys = "read" if flags.speculative_keys is not None else "not readable (vLLM judges them at start)"
    version = flags.version or "of unknown version"
    return f" (vLLM {version} at {flags.binary}; {methods}; SpeculativeConfig keys {keys})"


def _vllm_fix(message: str) -> str:
    from specd.engines.facts import VLLM

    if "no vllm" in message or "no such binary" in message or "exited with status" in message:
        return VLLM.install_fix
    if "config.json" in message or "model directory" in message:
        return "point `model` (or the drafter) at a Hugging Face model directory: config.json, weights, tokenizer"
    if "not offered by the installed vLLM" in message or "not known to the installed vLLM" in message \
            or "serve does not accept" in message:
        return "upgrade vLLM in the profile's environment, or change [vllm.speculative_config]"
    if "port" in message:
        return "stop what holds the port or change `port`"
    return "fix the profile (see the message)"
