"""Everything checked before a switch touches anything. Raises PreflightError (exit 2)."""

from __future__ import annotations

import difflib
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from specd import paths
from specd.deploy.systemd import journald_runs
from specd.engines.vllm_flags import vllm_flags
from specd.engines.vllm_render import build_vllm_argv, model_problems
from specd.errors import PreflightError
from specd.gpu.gguf import GgufInfo, read_gguf_info
from specd.gpu.nvml import process_tree
from specd.profiles.config import Deployment
from specd.profiles.flags import BinaryFlags, binary_flags, check_executable, resolve_binary
from specd.profiles.load import Profile, key_origin, load_profile
from specd.unit.render import build_argv, default_template_path, render_unit, secret_files

if TYPE_CHECKING:
    from specd.gpu.vram import VramEstimate


@dataclass
class Preflight:
    profile: Profile
    argv: list[str]
    unit_text: str
    model_info: GgufInfo | None  # None: the model comes from the Hub or a router's presets
    draft_info: GgufInfo | None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    secrets: tuple[tuple[Path, str], ...] = ()  # written 0600 before the unit (the API key)
    vram: str = ""   # the VRAM check's one line (per GPU, with a split's margin), or why it was skipped


def port_holders(port: int) -> set[int]:
    """PIDs listening on `port` (any address)."""
    holders: set[int] = set()
    try:
        connections = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return holders
    for conn in connections:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            holders.add(conn.pid)
    return holders


def check_socket(deployment: Deployment, profile: Profile) -> None:
    """A Unix socket endpoint (specd.endpoint): its directory exists, and no [proxy] is to forward to it (the
    proxy's upstream is a TCP port)."""
    socket = profile.endpoint.socket
    if socket is None:
        return
    if deployment.proxy is not None:
        raise PreflightError(f"profile '{profile.name}': host {socket} is a Unix socket, and the deployment has a "
                             "[proxy], which forwards to a TCP port only; nothing was changed",
                             hint="give the profile a TCP host and port, or drop [proxy] (clients then connect to "
                                  "the socket themselves)")
    if not Path(socket).parent.is_dir():
        raise PreflightError(f"profile '{profile.name}': host {socket}: the socket's directory "
                             f"{Path(socket).parent} does not exist, so llama-server could not listen there")


def check_port(profile: Profile, our_pids: set[int]) -> None:
    if profile.port is None:  # a Unix socket (check_socket)
        return
    holders = port_holders(profile.port)
    foreign = holders - our_pids
    if foreign:
        names = []
        for pid in sorted(foreign):
            try:
                names.append(f"{psutil.Process(pid).name()} (pid {pid})")
            except psutil.Error:
                names.append(f"pid {pid}")
        raise PreflightError(
            f"profile '{profile.name}': port {profile.port} is held by {', '.join(names)}, not by this unit"
        )


def check_strict_modes(paths_to_check: tuple[Path, ...]) -> None:
    """For system units (run as root): refuse files other users could change, like sshd's StrictModes."""
    for path in paths_to_check:
        for part in [path, *path.parents]:
            try:
                info = part.stat()
            except OSError:
                break
            if info.st_uid not in (0, os.getuid()):
                raise PreflightError(f"{part} is owned by uid {info.st_uid}; a system unit must only run "
                                     "files owned by root (or you)")
            sticky = bool(info.st_mode & stat.S_ISVTX) and stat.S_ISDIR(info.st_mode)
            if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky:
                raise PreflightError(
                    f"{part} is writable by other users (mode {stat.filemode(info.st_mode)}); "
                    "a system unit would run whatever they put there",
                    hint=f"chmod go-w {part}",
                )


def _model_info(profile: Profile, table: str, key: str, path: Path | None) -> GgufInfo | None:
    """The GGUF facts of a profile's model file; a missing or broken file is refused naming the
    profile, the file and line that set it, and the key, as every other profile error does."""
    if path is None or profile.launcher:
        return None
    try:
        return read_gguf_info(path)
    except PreflightError as exc:
        dotted = f"{table}.{key}" if table else key
        raise PreflightError(f"profile '{profile.name}' ({key_origin(profile, table, key)}, key '{dotted}'): "
                             f"{exc.message}", hint=exc.hint) from exc


def run_preflight(deployment: Deployment, name: str, *, current_main_pid: int = 0) -> Preflight:
    started = time.monotonic()
    profile = load_profile(deployment.profiles_dir, name)
    if deployment.scope == "system":
        check_strict_modes((profile.path, *profile.files))
    if profile.engine == "vllm":
        return vllm_preflight(deployment, profile, current_main_pid, started)
    flags = binary_flags(profile.binary, profile.launcher, profile.binary_args)
    model_info = _model_info(profile, "", "model", profile.model)
    draft_info = _model_info(profile, "speculative", "draft_model", profile.speculative.draft_model)
    if profile.speculative.type == "mtp" and model_info is not None and not model_info.has_mtp:
        raise PreflightError(
            f"profile '{name}': speculative type 'mtp' but {profile.model} has no MTP layers "
            f"({model_info.architecture}.nextn_predict_layers is 0 or missing)",
            hint="use the model's MTP GGUF (one with nextn/MTP heads), or another speculative type",
        )
    argv = build_argv(profile, flags)
    settings = environment_settings(profile, flags, argv)
    check_socket(deployment, profile)
    check_port(profile, set(process_tree(current_main_pid)) if current_main_pid > 0 else set())
    vram = (vram_note(profile, model_info, draft_info, current_main_pid, argv, flags) if model_info else
            f"VRAM check skipped: {model_source_note(profile)}")
    notes = [vram, hub_note(profile), *settings]
    unit_text = _unit_text(deployment, profile, argv)
    return Preflight(profile, argv, unit_text, model_info, draft_info, [n for n in notes if n],
                     time.monotonic() - started, secret_files(profile), vram)


def _unit_text(deployment: Deployment, profile: Profile, argv: list[str]) -> str:
    template = default_template_path()
    try:
        template_text = template.read_text(encoding="utf-8")
    except OSError as exc:
        raise PreflightError(f"unit template {template}: {exc.strerror}") from exc
    # Without journald the server's output would be lost, and with it why a start failed: keep it in a file.
    output_file = None if journald_runs() else paths.server_output_pattern()
    return render_unit(profile, argv, scope=deployment.scope, template=template_text, output_file=output_file)


def vllm_preflight(deployment: Deployment, profile: Profile, current_main_pid: int, started: float) -> Preflight:
    """A vLLM profile's preflight: its environment has a working vllm (asked for its flags), the model
    is a Hugging Face directory, the speculative method and keys are ones this vLLM knows, the port is
    free. No VRAM estimate: vLLM sizes its KV cache itself from gpu_memory_utilization."""
    problems = [] if profile.launcher else model_problems(profile)
    if problems:
        raise PreflightError(f"profile '{profile.name}': " + "; ".join(problems))
    argv = build_vllm_argv(profile, vllm_flags(profile.binary, profile.launcher))
    check_port(profile, set(process_tree(current_main_pid)) if current_main_pid > 0 else set())
    unit_text = _unit_text(deployment, profile, argv)
    vram = "VRAM check skipped: vLLM sizes its own KV cache (gpu_memory_utilization)"
    notes = [vram]
    if profile.hf_repo:  # vLLM downloads into the Hugging Face cache, one of those hub_cache_hit looks in
        hit = hub_cache_hit(profile.hf_repo)
        notes.append(f"{profile.hf_repo}: in the Hugging Face cache ({hit})" if hit else
                     f"{profile.hf_repo} is not in the Hugging Face cache here: the first start downloads it; the "
                     f"health gate waits up to {profile.health_timeout_s:.0f} s (health_timeout_s)")
    return Preflight(profile, argv, unit_text, None, None, notes, time.monotonic() - started, (), vram)


def quick_problems(deployment: Deployment, profile: Profile) -> list[str]:
    """The checks `specd profiles` runs for every profile: cheap, read-only, no --help, no GGUF read."""
    problems: list[str] = []
    if profile.engine == "vllm" and not profile.launcher:
        try:
            check_executable(resolve_binary(profile.binary))
        except PreflightError as exc:
            problems.append(f"{exc.message}: the profile's environment has no vllm")
        problems += model_problems(profile)
    elif not profile.launcher:
        try:
            check_executable(resolve_binary(profile.binary))
        except PreflightError as exc:
            problems.append(exc.message)
        for key, path in (("model", profile.model), ("speculative.draft_model", profile.speculative.draft_model),
                          ("models_preset", profile.models_preset), ("api_key_file", profile.api_key_file)):
            if path is not None and not path.is_file():
                problems.append(f"{key} {path}: no such file")
        if profile.models_dir is not None and not profile.models_dir.is_dir():
            problems.append(f"{profile.models_dir}: no such directory")
    proxy = deployment.proxy
    if proxy is not None and profile.endpoint.socket is not None:
        problems.append(f"host {profile.host} is a Unix socket; the [proxy] forwards to a TCP port only")
    if proxy is not None and proxy.listen_port == profile.port and (
            proxy.listen_host in (profile.host, "0.0.0.0", "::") or profile.host in ("0.0.0.0", "::")):
        problems.append(f"port {profile.port} is the proxy's listen port ([proxy] listen); give the profile another")
    return problems


def environment_settings(profile: Profile, flags: BinaryFlags, argv: list[str]) -> list[str]:
    """llama-server reads LLAMA_ARG_* variables as settings: one it does not know is refused (a typo
    would be silently ignored), one a flag on the command line also sets is reported (the flag wins)."""
    if not flags.env_names:
        return []  # this build's --help names no variables: nothing to check against
    notes: list[str] = []
    given = {flags.canonical(word) for word in argv if word.startswith("-")}
    for name, _ in profile.env:
        if not name.startswith("LLAMA_ARG_"):
            continue
        option = flags.setting_of(name)
        if option is None:
            close = difflib.get_close_matches(name, [e for e, _ in flags.env_names], n=1)
            raise PreflightError(f"{profile.path}: [env] {name} is not a setting {profile.binary} reads"
                                 + (f" — did you mean {close[0]}?" if close else ""))
        if option in given:
            notes.append(f"[env] {name} is overridden by {option} on the command line")
    return notes


def model_source_note(profile: Profile) -> str:
    if profile.launcher:
        return f"the model is read inside `{' '.join(profile.launcher)}`"
    if profile.hf_repo:
        return f"the model comes from Hugging Face ({profile.hf_repo})"
    return "router mode loads models on demand"


def hub_cache_hit(repo: str) -> Path | None:
    """llama.cpp's download cache for a Hub repo ($LLAMA_CACHE, ~/.cache/llama.cpp, the HF hub cache)."""
    owner_model = repo.split(":", 1)[0]
    home = Path.home()
    candidates = [Path(os.environ["LLAMA_CACHE"])] if os.environ.get("LLAMA_CACHE") else []
    candidates += [home / ".cache" / "llama.cpp", home / ".cache" / "huggingface" / "hub"]
    flat = owner_model.replace("/", "_")
    hub = "models--" + owner_model.replace("/", "--")
    for folder in candidates:
        if (folder / hub).is_dir():
            return folder / hub
        if folder.is_dir() and any(p.name.startswith(flat) for p in folder.iterdir()):
            return folder
    return None


def hub_note(profile: Profile) -> str:
    if not profile.hf_repo:
        return ""
    hit = hub_cache_hit(profile.hf_repo)
    if hit is not None:
        return f"{profile.hf_repo}: in llama.cpp's cache ({hit})"
    return (f"{profile.hf_repo} is not in llama.cpp's cache here: the first start downloads it; "
            f"the health gate waits up to {profile.health_timeout_s:.0f} s (health_timeout_s)")


def vram_note(profile: Profile, model: GgufInfo, draft: GgufInfo | None, current_main_pid: int,
              argv: list[str], flags: BinaryFlags) -> str:
    """The split-mode probe (row/tensor split: does the binary load the model so?) and the VRAM fit
    check on every GPU the unit will see; raises naming the binary's refusal, or the biggest parts and
    what to change when a GPU's share does not fit; returns a one-line note otherwise."""
    from specd.gpu.check import split_mode_check, vram_check

    try:
        probe = split_mode_check(argv, dict(profile.env), model, flags)
    except PreflightError as exc:
        raise PreflightError(f"profile '{profile.name}': {exc.message}", hint=exc.hint) from exc
    result = vram_check(argv, dict(profile.env), model, draft, current_main_pid, flags=flags)
    result.raise_if_not_ok()
    return result.message if probe is None or probe.verdict == "loads" else f"{result.message}; {probe.describe()}"


def vram_details(deployment: Deployment, name: str, *, current_main_pid: int = 0) -> tuple[list[str], bool]:
    """What `specd show --vram` prints: the split-mode probe, each GPU's estimate by part, the split's
    margin and where it comes from, the verdict; and whether the profile fits. Changes nothing."""
    from specd.gpu.check import split_mode_check, vram_plan

    profile = load_profile(deployment.profiles_dir, name)
    if profile.launcher or not profile.model:
        return [f"VRAM check skipped: {model_source_note(profile)}"], True
    flags = binary_flags(profile.binary, profile.launcher, profile.binary_args)
    model = read_gguf_info(profile.model)
    draft = read_gguf_info(profile.speculative.draft_model) if profile.speculative.draft_model else None
    argv = build_argv(profile, flags)
    lines: list[str] = []
    try:
        probe = split_mode_check(argv, dict(profile.env), model, flags)
        if probe is not None:
            lines.append(probe.describe())
    except PreflightError as exc:
        return [exc.message], False
    plan = vram_plan(argv, dict(profile.env), model, draft, current_main_pid, flags=flags)
    return lines + plan.lines(), plan.result.ok


def vram_estimate(profile: Profile, model: GgufInfo, draft: GgufInfo | None) -> VramEstimate:
    """What this profile's server needs in all, from its GGUF files and the settings its argv and
    [env] give, on the GPUs it would see here (the status page's per-profile estimate): the sum of
    the per-GPU estimates the fit check compares, so the two never disagree."""
    from specd.gpu.check import server_settings
    from specd.gpu.fit import visible_devices
    from specd.gpu.nvml import NoGpu, probe_gpus
    from specd.gpu.vram import combined, estimate_per_gpu, estimate_vram

    flags = binary_flags(profile.binary, profile.launcher, profile.binary_args)
    argv = build_argv(profile, flags)
    settings = server_settings(argv, dict(profile.env), flags)
    state = probe_gpus()
    devices = () if isinstance(state, NoGpu) else visible_devices(state, settings.visible_devices)
    if not devices:                  # no GPU here: what it would need on one
        return estimate_vram(model, draft, 0, None, settings=settings)
    return combined(estimate_per_gpu(model, draft, settings, len(devices), tuple(d.free_bytes for d in devices)))
