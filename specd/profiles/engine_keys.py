"""Which engine a profile runs, and the keys of the second one, vLLM, defined once.

A profile says `engine = "llama-server"` (the default) or `engine = "vllm"`. A vLLM profile keeps the
keys both engines share (binary, model or hf_repo, alias, host, port, args, env, systemd, the gate's
timings)
and puts vLLM's own options in a `[vllm]` table, with `--speculative-config` as its
`[vllm.speculative_config]` sub-table (rendered to the JSON vLLM reads). Keys only llama-server
understands are refused on a vLLM profile and `[vllm]` on a llama-server one, naming the key, so a
profile never carries a setting its server would not see.

The checks here are what a file can say about itself; what the installed vLLM accepts (its flags,
its speculative methods and SpeculativeConfig keys) is asked of it at preflight
(`specd.engines.vllm_flags`), never a fixed table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from specd.profiles.schema import Check, Key, Table, in_range, matches, one_of

EngineName = Literal["llama-server", "vllm"]
ENGINES: tuple[EngineName, ...] = ("llama-server", "vllm")
DEFAULT_ENGINE: EngineName = "llama-server"

# Keys both engines read; every other top-level key and table is llama-server's alone.
SHARED_KEYS = frozenset({"description", "inherits", "abstract", "engine", "binary", "launcher", "model", "hf_repo",
                         "alias", "host", "port", "args", "health_timeout_s", "stability_s", "env", "systemd", "vllm"})

_TOKEN = matches(r"[A-Za-z0-9_.+-]{1,64}", "one word of letters, digits and _ . + -")
# A drafter: a local Hugging Face directory (absolute, ~ or ${SPECD_CACHE}), or a Hub id vLLM downloads.
_DRAFTER = matches(r"(/|~|\$\{SPECD_CACHE\}).*|[A-Za-z0-9._-]+/[A-Za-z0-9._-]+",
                   "an absolute path of a Hugging Face model directory, or a Hub id (owner/name)")


def _batch_schedule(value: Any) -> str | None:
    """vLLM's num_speculative_tokens_per_batch_size: [[first_batch_size, last_batch_size, tokens], ...]."""
    for index, entry in enumerate(value):
        if not (isinstance(entry, list) and len(entry) == 3
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in entry)):
            return (f"must be a list of [first_batch_size, last_batch_size, tokens] triples of whole numbers; "
                    f"item {index} is {entry!r}")
    return None


def _scalar_or_list(value: Any) -> str | None:
    return None if isinstance(value, (str, int, float, bool, list)) else f"must be a value, not {value!r}"


@dataclass(frozen=True)
class VllmKey:
    """One key of `[vllm]` or `[vllm.speculative_config]`."""

    name: str
    kind: type | tuple[type, ...]
    doc: str
    flag: str = ""  # the `vllm serve` option it renders to ("" for the speculative sub-table)
    check: Check | None = None

    @property
    def schema_key(self) -> Key:
        return Key(self.kind, self.check, self.doc)


VLLM_KEYS: tuple[VllmKey, ...] = (
    VllmKey("dtype", str, "weights and activations: auto, bfloat16, float16 ... (what --dtype offers)", "--dtype",
            _TOKEN),
    VllmKey("max_model_len", int, "context length in tokens (prompt and output)", "--max-model-len",
            in_range(1, 1 << 24)),
    VllmKey("gpu_memory_utilization", float, "the share of GPU memory vLLM takes (on a CPU build: of host memory)",
            "--gpu-memory-utilization", in_range(0.01, 1.0)),
    VllmKey("tensor_parallel_size", int, "GPUs one model is split across", "--tensor-parallel-size",
            in_range(1, 1024)),
    VllmKey("quantization", str, "the weights' quantization method (fp8, awq, gptq ...)", "--quantization", _TOKEN),
)
SPECULATIVE_CONFIG_KEYS: tuple[VllmKey, ...] = (
    VllmKey("method", str, "mtp, eagle3, dflash, draft_model, ngram, suffix ... (what the installed vLLM offers)",
            check=_TOKEN),
    VllmKey("model", str, "the drafter: a Hugging Face directory or Hub id", check=_DRAFTER),
    VllmKey("num_speculative_tokens", int, "tokens drafted per step", check=in_range(1, 1024)),
    VllmKey("num_speculative_tokens_per_batch_size", list,
            "drafted tokens by batch size: [[first, last, tokens], ...] (where the installed vLLM knows it)",
            check=_batch_schedule),
)
_SPECULATIVE_SCHEMA = Table(keys={k.name: k.schema_key for k in SPECULATIVE_CONFIG_KEYS},
                            free_form=Key((str, int, float, bool, list), _scalar_or_list,
                                          "any other SpeculativeConfig key, checked against the installed vLLM"))
VLLM_SCHEMA = Table(keys={k.name: k.schema_key for k in VLLM_KEYS},
                    tables={"speculative_config": _SPECULATIVE_SCHEMA})
ENGINE_KEY = Key(str, one_of(*ENGINES), "the server: llama-server (default) or vllm")


@dataclass(frozen=True)
class VllmSettings:
    """A vLLM profile's `[vllm]` table as loaded (types here, checks in VLLM_KEYS)."""

    dtype: str | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    tensor_parallel_size: int | None = None
    quantization: str | None = None
    speculative_config: tuple[tuple[str, Any], ...] = ()  # as written, in the file's order

    @property
    def method(self) -> str:
        """The speculative method, "none" without a speculative_config (a plain vLLM profile)."""
        return str(dict(self.speculative_config).get("method", "none")) if self.speculative_config else "none"

    def drafter(self) -> str | None:
        model = dict(self.speculative_config).get("model")
        return str(model) if model is not None else None


def engine_of(data: Mapping[str, Any]) -> EngineName:
    value = data.get("engine", DEFAULT_ENGINE)
    return "vllm" if value == "vllm" else DEFAULT_ENGINE


def engine_problems(data: Mapping[str, Any], path: Path, name: str) -> list[str]:
    """Keys the profile's engine would never see, after inheritance: one message each."""
    if engine_of(data) == "vllm":
        foreign = sorted(key for key in data if key not in SHARED_KEYS)
        problems = [f"{path}: profile '{name}' is engine = \"vllm\"; '{key}' is a llama-server setting that "
                    "vllm serve would not see" + _instead(key) for key in foreign]
        if "alias" not in data:
            problems.append(f"{path}: profile '{name}' needs 'alias' (vLLM's --served-model-name, the name clients "
                            "ask for)")
        if "model" not in data and "hf_repo" not in data:
            problems.append(f"{path}: profile '{name}' needs 'model' (a Hugging Face model directory) or 'hf_repo' "
                            "(a Hub id vLLM downloads)")
        if isinstance(data.get("hf_repo"), str) and ":" in data["hf_repo"]:
            problems.append(f"{path}: profile '{name}': hf_repo {data['hf_repo']!r} names a GGUF quant (':'); vLLM "
                            "serves a Hub repository as owner/name")
        return problems
    if "vllm" in data:
        return [(f"{path}: profile '{name}' has a [vllm] table but runs llama-server; set engine = \"vllm\" "
                 "or drop [vllm]")]
    return []


_INSTEAD = {
    "ctx_size": "[vllm] max_model_len",
    "speculative": "[vllm.speculative_config] (method, model, num_speculative_tokens)",
    "api_key": "an EnvironmentFile= with VLLM_API_KEY in [systemd.Service] (vLLM has no key file option)",
}


def _instead(key: str) -> str:
    return f"; use {_INSTEAD[key]}" if key in _INSTEAD else ""


def vllm_settings(data: Mapping[str, Any], expand: Callable[[str], str]) -> VllmSettings | None:
    """The loaded `[vllm]` table of a vLLM profile (None for llama-server); a drafter's path expanded
    (`~`, `${SPECD_CACHE}`) as the profile's other paths are."""
    if engine_of(data) != "vllm":
        return None
    table = data.get("vllm", {})
    values: dict[str, Any] = {}
    for key in VLLM_KEYS:
        if key.name in table:
            values[key.name] = float(table[key.name]) if key.kind is float else table[key.name]
    spec = dict(table.get("speculative_config", {}))
    if isinstance(spec.get("model"), str) and spec["model"].startswith(("/", "~", "${SPECD_CACHE}")):
        spec["model"] = expand(spec["model"])
    return VllmSettings(**values, speculative_config=tuple(spec.items()))


def vllm_key_table() -> str:
    """The README's table of `[vllm]` keys, in Markdown."""
    rows = ["| key | flag | meaning |", "|---|---|---|"]
    rows += [f"| `vllm.{key.name}` | `{key.flag}` | {key.doc} |" for key in VLLM_KEYS]
    rows += [f"| `vllm.speculative_config.{key.name}` | `--speculative-config` | {key.doc} |"
             for key in SPECULATIVE_CONFIG_KEYS]
    return "\n".join(rows) + "\n"
