"""`specd import` of a `vllm serve` command (a unit's ExecStart=, a llama-swap model's cmd:).

The command becomes a vLLM profile that renders back to the same server: the model directory, the
served names (the alias; several names stay several), host and port (vLLM's default port written out),
each option a `[vllm]` key renders (`--dtype`, `--max-model-len`, `--gpu-memory-utilization`,
`--tensor-parallel-size`, `--quantization`, in any of their spellings and `--flag=value` forms),
`--speculative-config` (JSON, or its `--speculative-config.KEY VALUE` form) as the
`[vllm.speculative_config]` table, and every other argument into `args` as written. What a vLLM
profile cannot say is refused, naming it: a model that is neither a local directory nor a Hub id, a
command with no served name whose default (the model path) is no valid alias.
"""

from __future__ import annotations

import json
import re
from pathlib import PurePath
from typing import Any, Protocol

from specd.engines.facts import VLLM, command_facts
from specd.errors import UsageError
from specd.profiles.engine_keys import VLLM_KEYS
from specd.profiles.schema import kind_name

# Spellings of the [vllm] keys' options that vLLM also accepts (its --help=all, 0.32.0).
_OTHER_SPELLINGS = {"--device-memory-utilization": "--gpu-memory-utilization", "-tp": "--tensor-parallel-size",
                    "-q": "--quantization"}
_BY_FLAG = {key.flag: key for key in VLLM_KEYS}
_HUB_ID = re.compile(r"[A-Za-z0-9._-]+/[A-Za-z0-9._-]+")


class Rows(Protocol):
    data: dict[str, Any]

    def row(self, source: str, became: str) -> None: ...


def _scalar(text: str) -> Any:
    """A `--speculative-config.KEY VALUE` value as vLLM's JSON parser would take it."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _convert(flag: str, value: str, where: str) -> Any:
    key = _BY_FLAG[flag]
    try:
        return float(value) if key.kind is float else int(value) if key.kind is int else value
    except ValueError:
        raise UsageError(f"{where}: {flag} {value!r} is not {kind_name(key.kind)}") from None


def _served_names(argv: list[str], start: int) -> tuple[list[str], int]:
    names: list[str] = []
    index = start
    while index < len(argv) and not argv[index].startswith("-"):
        names.append(argv[index])
        index += 1
    return names, index


class _Options:
    """The words after the model, sorted into profile keys, `[vllm]`, its speculative table and `args`."""

    def __init__(self, result: Rows, model: str, where: str) -> None:
        self.result, self.model, self.where = result, model, where
        self.vllm: dict[str, Any] = {}
        self.speculative: dict[str, Any] = {}
        self.args: list[str] = []

    def take(self, rest: list[str], index: int) -> int:
        """Read the option at `index`; return the index of the next one."""
        word = rest[index]
        flag, has_value, inline = word.partition("=")
        flag = _OTHER_SPELLINGS.get(flag, flag)
        value = inline if has_value else (rest[index + 1] if index + 1 < len(rest) else None)
        after = index + (1 if has_value else 2)
        if flag == "--served-model-name":
            names, end = ([inline], index + 1) if has_value else _served_names(rest, index + 1)
            self.result.data["alias"] = ",".join(names)
            self.result.row(word, f"alias = {self.result.data['alias']!r} (the served names)")
            return end
        if value is None or flag == "--model" and value == self.model:
            return after if value is not None else self._arg(word, index)
        if flag in ("--host", "--port"):
            self.result.data[flag[2:]] = int(value) if flag == "--port" else value
            self.result.row(f"{flag} {value}", f"{flag[2:]} = {self.result.data[flag[2:]]!r}")
        elif flag in _BY_FLAG:
            self.vllm[_BY_FLAG[flag].name] = _convert(flag, value, self.where)
            self.result.row(word if has_value else f"{word} {value}", f"vllm.{_BY_FLAG[flag].name}")
        elif flag in ("--speculative-config", "-sc"):
            self.speculative.update(_json_object(value, self.where))
            self.result.row("--speculative-config", "vllm.speculative_config (a table)")
        elif flag.startswith("--speculative-config."):
            self.speculative[flag.split(".", 1)[1]] = _scalar(value)
            self.result.row(word, f"vllm.speculative_config.{flag.split('.', 1)[1]}")
        else:
            return self._arg(word, index)
        return after

    def _arg(self, word: str, index: int) -> int:
        self.args.append(word)
        return index + 1


def _json_object(value: str, where: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise UsageError(f"{where}: --speculative-config is not JSON ({exc}): {value[:80]!r}") from None
    if not isinstance(parsed, dict):
        raise UsageError(f"{where}: --speculative-config is not a JSON object: {value[:80]!r}")
    return parsed


def _as_vllm_serve(argv: list[str], result: Rows) -> list[str]:
    """`PYTHON -m vllm.entrypoints.openai.api_server --model M ...` as the same environment's `vllm serve M ...`:
    the same server behind vLLM's own command (pip puts `vllm` beside the interpreter)."""
    module = "vllm.entrypoints.openai.api_server"
    if module not in argv or argv.index(module) < 2 or argv[argv.index(module) - 1] != "-m":
        return argv
    at = argv.index(module)
    python, rest = argv[at - 2], argv[at + 1:]
    model = next((rest[i + 1] for i, word in enumerate(rest[:-1]) if word == "--model"), None)
    model = model or next((word.split("=", 1)[1] for word in rest if word.startswith("--model=")), None)
    if model is None:
        return argv
    options = [word for i, word in enumerate(rest) if not word.startswith("--model") and
               not (i > 0 and rest[i - 1] == "--model")]
    vllm = str(PurePath(python).parent / "vllm")
    result.row(f"{python} -m {module}", f"binary = {vllm!r} serve: the same API server, as vLLM's own command")
    return [*argv[:at - 2], vllm, "serve", model, *options]


def _model_source(model: str | None, result: Rows, where: str) -> None:
    if model and model.startswith("/"):
        result.data["model"] = model
        result.row("model", f"model = {model!r}")
    elif model and _HUB_ID.fullmatch(model):
        result.data["hf_repo"] = model
        result.row("model", f"hf_repo = {model!r} (a Hub id: vLLM downloads it on first start)")
    else:
        raise UsageError(f"{where}: vllm serve {model or '(no model)'}: a vLLM profile serves a local Hugging Face "
                         "model directory (an absolute path) or a Hub id (owner/name)")


def _defaults(result: Rows, model: str, where: str) -> None:
    """What vLLM assumes when the command says nothing, written out so the profile renders the same server."""
    if "alias" not in result.data and "hf_repo" in result.data:
        result.data["alias"] = result.data["hf_repo"]
        result.row("no --served-model-name", f"alias = {model!r} (vLLM serves the model as given)")
    if "alias" not in result.data:
        raise UsageError(f"{where}: no --served-model-name: vLLM serves the model as {model!r}, which is no alias "
                         "specd can use (letters first, no spaces); add --served-model-name NAME, then import")
    if "host" not in result.data:  # vLLM listens on every address unless told; specd's own default is loopback
        result.data["host"] = "0.0.0.0"
        result.row("no --host", "host = '0.0.0.0' (vLLM's default, every address, written out)")
    if "port" not in result.data:
        result.data["port"] = VLLM.default_port
        result.row("no --port", f"port = {VLLM.default_port} (vLLM's default, written out)")


def import_vllm_command(argv: list[str], environment: dict[str, str], description: str, result: Rows, *,
                        where: str) -> None:
    """Fill `result` (its data starts with description and binary) from a `vllm serve` argv."""
    argv = _as_vllm_serve(argv, result)
    facts = command_facts(argv)
    if facts is None or "serve" not in argv:
        raise UsageError(f"{where}: not a `vllm serve` command")
    serve_at = argv.index("serve")
    if serve_at != 1:
        result.data["launcher"] = argv[:serve_at - 1]
    result.data.update(engine="vllm", binary=argv[serve_at - 1], description=description)
    _model_source(facts.model, result, where)
    model = str(facts.model)
    rest = argv[serve_at + 1:]
    if rest and rest[0] == model:
        rest = rest[1:]
    options = _Options(result, model, where)
    index = 0
    while index < len(rest):
        index = options.take(rest, index)
    _defaults(result, model, where)
    if options.args:
        result.data["args"] = options.args
        result.row(" ".join(options.args)[:80], "args (as written; checked against vllm serve --help=all at preflight)")
    if options.speculative:
        options.vllm["speculative_config"] = options.speculative
    if options.vllm:
        result.data["vllm"] = options.vllm
    if environment:
        result.data["env"] = dict(environment)
