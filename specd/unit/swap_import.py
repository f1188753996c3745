"""`specd import --from-llama-swap`: one profile per llama-swap model that runs llama-server.

llama-swap starts a server per model on demand and routes by model ID; specd keeps one server
behind one alias and switches between profiles. So each model's command becomes a profile whose
alias is what clients asked llama-swap for (the model ID, then its aliases), and what has no
place in that model (TTL, groups, filters, hooks) is reported. A model whose `cmd` is not a
llama-server command (a docker wrapper, a remote proxy-only entry) is listed with the reason.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from specd.engines.facts import is_vllm_serve
from specd.errors import UsageError
from specd.profiles.load import profile_path
from specd.unit.importer import ImportResult, profile_from_command, write_profile
from specd.unit.llamaswap import SwapModel, read_llama_swap
from specd.unit.syntax import read_unit_text
from specd.unit.wrappers import is_llama_server, unwrap


@dataclass(frozen=True)
class SwapImport:
    """What became of one llama-swap model: a profile, or the reason it is not one."""

    model: str
    profile: Path | None
    reason: str
    result: ImportResult | None


def profile_name(model_id: str) -> str:
    """A profile name for a model ID: letters, digits and . _ -, starting with a letter or digit."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model_id).strip("-._")[:64] or "model"


def _profile(model: SwapModel, where: str) -> ImportResult:
    if not model.argv:
        raise UsageError(f"no cmd: a remote endpoint behind llama-swap ({model.proxy}); specd runs a local "
                         "llama-server")
    unwrapped = unwrap(list(model.argv), dict(model.environment), where)
    if is_vllm_serve(unwrapped.argv):  # a `vllm serve` cmd: becomes a vLLM profile, llama-swap's names its alias
        vllm = profile_from_command(unwrapped.argv, {**dict(model.environment), **unwrapped.environment},
                                    model.description or f"llama-swap model {model.name}", where=where,
                                    notes=unwrapped.notes)
        names = [*str(vllm.data["alias"]).split(","), model.name, *model.aliases]
        vllm.data["alias"] = ",".join(dict.fromkeys(names))
        vllm.row(f"models: {model.name}", f"alias = {vllm.data['alias']!r} (what clients asked llama-swap for)")
        return vllm
    if not is_llama_server(unwrapped.argv[0]):
        raise UsageError(f"{unwrapped.argv[0]} is not llama-server (its cmd: {' '.join(model.argv)[:80]}); "
                         "import the llama-server command that script runs")
    result = profile_from_command(unwrapped.argv, {**dict(model.environment), **unwrapped.environment},
                                  model.description or f"llama-swap model {model.name}", where=where,
                                  notes=unwrapped.notes)
    if unwrapped.launcher:
        result.data["launcher"] = list(unwrapped.launcher)
    if "alias" in result.data:  # not router mode
        defaulted = any(row.source == "no --alias" for row in result.rows)
        own = [] if defaulted else str(result.data["alias"]).split(",")
        result.data["alias"] = ",".join(dict.fromkeys([*own, model.name, *model.aliases]))
        result.row(f"models: {model.name}", f"alias = {result.data['alias']!r} (what clients asked llama-swap for)")
    for note in model.not_carried:
        result.row(model.name, note)
    return result


def import_llama_swap(config: Path, profiles_dir: Path, *, force: bool = False,
                      environ: Mapping[str, str] | None = None) -> tuple[list[SwapImport], tuple[str, ...]]:
    """A profile per llama-server model of the config; (what became of each model, top-level notes)."""
    swap = read_llama_swap(read_unit_text(config), str(config), os.environ if environ is None else environ)
    outcomes: list[SwapImport] = []
    for model in swap.models:
        where = f"{config}: model {model.name}"
        target = profile_path(profiles_dir, profile_name(model.name))
        try:
            if target.exists() and not force:
                raise UsageError(f"{target} exists; pass --force to overwrite")
            result = _profile(model, where)
            write_profile(target, result, source=where)
        except UsageError as exc:
            outcomes.append(SwapImport(model.name, None, exc.message.removeprefix(f"{where}: "), None))
            continue
        outcomes.append(SwapImport(model.name, target, "", result))
    return outcomes, swap.not_carried
