"""A vLLM profile -> its `vllm serve` argv, and the checks that refuse what cannot start.

Pure given the installed vLLM's answers (`VllmFlags`): the served model names are the profile's alias
(comma-separated names become several; clients and the health gate ask for the first), host and port
are the profile's, each `[vllm]` key renders
to its flag, and `[vllm.speculative_config]` to `--speculative-config` as compact JSON in the file's
key order. Every flag (the profile's `args` too), the speculative method and every speculative key
are checked against what this vLLM says it accepts; where it cannot say (an older --help without
`--spec-method`, a launcher that hides its Python), vLLM judges at start and the gate reports it.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from specd.engines.vllm_flags import VllmFlags
from specd.errors import PreflightError, ProfileError
from specd.profiles.engine_keys import VLLM_KEYS, VllmSettings
from specd.profiles.load import Profile

# Methods whose drafter is a model of its own (`model` in the speculative config); mtp uses the
# target's own heads, ngram and suffix the text itself.
NEEDS_DRAFTER = frozenset({"draft_model", "eagle", "eagle3", "dflash", "medusa", "mlp_speculator"})


def _settings(profile: Profile) -> VllmSettings:
    if profile.vllm is None:
        raise ProfileError(f"profile '{profile.name}' is not a vLLM profile")
    return profile.vllm


def speculative_json(settings: VllmSettings) -> str | None:
    """`--speculative-config`'s value: the table as JSON, keys in the file's order; None without one."""
    if not settings.speculative_config:
        return None
    return json.dumps(dict(settings.speculative_config), separators=(",", ":"))


def build_vllm_argv(profile: Profile, flags: VllmFlags) -> list[str]:
    """The exact argv the unit will run; raises PreflightError for what this vLLM would refuse."""
    settings = _settings(profile)
    written = dict(profile.written_paths)
    model = written.get("model", str(profile.model)) if profile.model is not None else str(profile.hf_repo)
    argv = [written.get("binary", str(profile.binary)), "serve", model,
            "--served-model-name", *str(profile.alias).split(","), "--host", profile.host, "--port", str(profile.port)]
    for key in VLLM_KEYS:
        value = getattr(settings, key.name)
        if value is not None:
            argv += [key.flag, repr(value) if isinstance(value, float) else str(value)]
    check_speculative(profile, settings, flags)
    config = speculative_json(settings)
    if config is not None:
        argv += ["--speculative-config", config]
    taken = {flags.canonical(word) for word in argv[3:] if word.startswith("-")}
    for arg in profile.args:
        if arg.startswith("-") and flags.canonical(arg) in taken:
            raise ProfileError(f"{profile.path}: 'args' repeats {arg}, which the profile already sets through a "
                               "typed key")
    argv += list(profile.args)
    unknown = [word for word in argv[3:] if word.startswith("--") and not flags.has(word)]
    if unknown:
        raise PreflightError(f"profile '{profile.name}': {profile.binary} serve does not accept {', '.join(unknown)} "
                             f"(not in its --help=all{_version(flags)})")
    return [*profile.launcher, *argv]


def _version(flags: VllmFlags) -> str:
    return f"; vLLM {flags.version}" if flags.version else ""


def _installed(flags: VllmFlags) -> str:
    return f"the installed vLLM {flags.version}" if flags.version else "the installed vLLM"


def check_speculative(profile: Profile, settings: VllmSettings, flags: VllmFlags) -> None:
    """The method this vLLM offers, keys its SpeculativeConfig has, a drafter where the method needs one."""
    config = dict(settings.speculative_config)
    if not config:
        return
    method = config.get("method")
    if method is None and "model" not in config:
        raise PreflightError(f"profile '{profile.name}': [vllm.speculative_config] needs 'method' (or a drafter "
                             "'model' whose method vLLM detects)")
    offered = flags.speculative_methods
    if method is not None and offered and method not in offered:
        close = difflib.get_close_matches(str(method), offered, n=1, cutoff=0.6)
        raise PreflightError(
            f"profile '{profile.name}': speculative method '{method}' is not offered by {_installed(flags)} "
            f"(--spec-method lists {', '.join(offered)})"
            + (f" — did you mean '{close[0]}'?" if close else ""),
            hint="upgrade vLLM in the profile's environment, or pick a method it lists")
    if flags.speculative_keys is not None:
        unknown = [key for key in config if key not in flags.speculative_keys]
        if unknown:
            hint = difflib.get_close_matches(unknown[0], flags.speculative_keys, n=1, cutoff=0.6)
            raise PreflightError(
                f"profile '{profile.name}': [vllm.speculative_config] {', '.join(repr(k) for k in unknown)} "
                f"{'is' if len(unknown) == 1 else 'are'} not known to {_installed(flags)}'s SpeculativeConfig"
                + (f" — did you mean '{hint[0]}'?" if hint else ""))
    if method in NEEDS_DRAFTER and "model" not in config:
        raise PreflightError(f"profile '{profile.name}': speculative method '{method}' needs a drafter: set "
                             "[vllm.speculative_config] model")


def model_problems(profile: Profile) -> list[str]:
    """A local model directory vLLM can load: it exists and has config.json (also the drafter's)."""
    problems: list[str] = []
    settings = _settings(profile)
    drafter = settings.drafter()
    for what, path in (("model", profile.model), ("drafter", Path(drafter) if drafter and drafter.startswith("/")
                                                  else None)):
        if path is None:
            continue
        if not path.is_dir():
            problems.append(f"{path}: no such model directory (the profile's {what}; vLLM loads a Hugging Face "
                            "directory, not a file)")
        elif not (path / "config.json").is_file():
            problems.append(f"{path}: a model directory without config.json (the profile's {what}); vLLM "
                            "cannot load it")
    return problems
