"""What specd knows about each engine that is not in its `--help`: names it publishes, defaults it
assumes, how to recognise it on a unit's command line, and how to fix a box that lacks it.

Pure: no files, no processes. `specd.unit.parse` reads a unit's served name and port through
`command_facts`, the drain reads `in_progress_metrics`, the bench `spec_counter_names`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath

from specd.profiles.engine_keys import EngineName


@dataclass(frozen=True)
class EngineFacts:
    name: EngineName
    metrics_prefix: str  # Prometheus names on /metrics start with this and a colon
    default_port: int  # when the command line names none
    in_progress_metrics: tuple[str, ...]  # gauges that add up to the requests running or queued
    install_fix: str  # what doctor says when the profile's binary is missing

    def counter(self, name: str) -> str:
        return f"{self.metrics_prefix}:{name}"

    @property
    def drafted_counter(self) -> str:
        """Draft tokens proposed, summed over requests: llama.cpp's newer builds and vLLM spell it alike."""
        return self.counter("spec_decode_num_draft_tokens_total")

    @property
    def accepted_counter(self) -> str:
        return self.counter("spec_decode_num_accepted_tokens_total")


LLAMA_SERVER = EngineFacts(
    name="llama-server", metrics_prefix="llamacpp", default_port=8080,
    in_progress_metrics=("llamacpp:requests_processing", "llamacpp:requests_deferred"),
    install_fix="build it: scripts/build-llama-server.sh (vanilla llama.cpp, pinned), or fix `binary`",
)
VLLM = EngineFacts(
    name="vllm", metrics_prefix="vllm", default_port=8000,
    in_progress_metrics=("vllm:num_requests_running", "vllm:num_requests_waiting"),
    install_fix="install vLLM into the environment `binary` names (`python3 -m venv /opt/vllm && "
                "/opt/vllm/bin/pip install vllm`; a CPU box: scripts/get-vllm.sh), or fix `binary`",
)
FACTS: dict[str, EngineFacts] = {LLAMA_SERVER.name: LLAMA_SERVER, VLLM.name: VLLM}


def facts_of(engine: str) -> EngineFacts:
    return FACTS.get(engine, LLAMA_SERVER)


@dataclass(frozen=True)
class CommandFacts:
    """What a `vllm serve` command line says about the server it starts."""

    engine: EngineName
    model: str | None  # the positional MODEL (or --model)
    served_name: str | None  # the first --served-model-name, else the model as given (vLLM's own default)
    port: int


def is_vllm_serve(argv: Sequence[str]) -> bool:
    """`vllm serve ...` (any path to a `vllm` command, a launcher in front allowed), or vLLM's API
    server module run by a Python."""
    for index, word in enumerate(argv[:-1]):
        if PurePath(word).name == "vllm" and argv[index + 1] == "serve":
            return True
    return "vllm.entrypoints.openai.api_server" in argv


def _option(argv: Sequence[str], *names: str) -> str | None:
    for index, word in enumerate(argv):
        for name in names:
            if word == name and index + 1 < len(argv):
                return argv[index + 1]
            if word.startswith(name + "="):
                return word.split("=", 1)[1]
    return None


# vLLM options that take a value, so their value is not mistaken for the positional model.
_VALUED_BEFORE_MODEL = ("--host", "--port", "--served-model-name", "--config", "-asc", "--api-server-count")


def _positional_model(argv: Sequence[str]) -> str | None:
    try:
        start = list(argv).index("serve") + 1
    except ValueError:
        return None
    words = list(argv[start:])
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word.startswith("-"):
            skip = word in _VALUED_BEFORE_MODEL
            continue
        return word
    return None


def command_facts(argv: Sequence[str]) -> CommandFacts | None:
    """The served name and port of a vLLM command line; None when it is not one."""
    if not is_vllm_serve(argv):
        return None
    model = _option(argv, "--model") or _positional_model(argv)
    served = _option(argv, "--served-model-name")
    port_text = _option(argv, "--port")
    port = int(port_text) if port_text and port_text.isdigit() else VLLM.default_port
    return CommandFacts("vllm", model, served or model, port)
