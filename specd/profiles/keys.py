"""Every profile key, defined once: its type and check, default, llama-server flag spellings, and
one line of documentation. Validation (the schema), loading (the `Profile` fields), rendering (the
argv, in this order), import (flag -> key) and the README's key table all read this list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from specd.profiles.engine_keys import DEFAULT_ENGINE, ENGINE_KEY, VLLM_SCHEMA
from specd.profiles.schema import Check, Key, Table, in_range, list_of_strings, matches

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
_PATH = r"(/|~|\$\{SPECD_CACHE\}).*"
# A file or directory llama-server opens: absolute, or (as a unit may write it) relative to its working
# directory, which a profile with such a path must set (load.py: [systemd.Service] WorkingDirectory=).
_SERVER_PATH = matches(_PATH + r"|[^-/~$\s][^\n]*", "an absolute path (or start with ~ or ${SPECD_CACHE}), or a "
                       "path relative to [systemd.Service] WorkingDirectory=")
# systemd runs a bare command name from its own search path (systemd.service(5), "Command lines").
_BINARY = matches(_PATH + r"|[A-Za-z0-9._+-]+",
                  "an absolute path (or ~, ${SPECD_CACHE}), or a command name systemd finds in its PATH")
_HF_REPO = matches(r"[A-Za-z0-9._-]+/[A-Za-z0-9._-]+(:[A-Za-z0-9._-]+)?",
                   "<user>/<model>[:quant], as llama-server's -hf takes it")
# An id llama-server serves: a name, or (with no --alias) the model path or Hugging Face repo as given.
_ALIAS = matches(r"[^\s,-][^\s,]{0,511}(,[^\s,-][^\s,]{0,511})*",
                 "letters, digits and other printable characters, no spaces or commas (a path or user/repo:quant "
                 "is fine), not starting with -; several names separated by commas")
# A host, or (llama-server's rule: a --host ending in .sock) a Unix socket: specd.endpoint; a socket's path fits
# in sun_path (107 bytes) and is absolute, so it does not hang on the working directory.
_HOST = matches(r"[A-Za-z0-9.:\[\]-]{1,253}|/[^\s]{0,101}\.sock",
                "a host name or IP address, or a Unix socket: an absolute path ending in .sock "
                "(no spaces, at most 107 characters: the kernel's limit)")
# Values the binary judges (its --help at preflight), not a fixed list: forks add cache types
# (turbo4, ...) and speculative types, builds spell booleans differently (on, 1, true).
_TOKEN = matches(r"[A-Za-z0-9_.+-]{1,64}", "one word of letters, digits and _ . + -")
_SPEC_TYPE = matches(r"[A-Za-z0-9_.:=,+-]{1,200}",
                     "a speculative type, a chain (draft-dflash,ngram-mod) or with parameters (mtp:n_max=2)")


def _layers(value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return in_range(-1, 100000)(value)
    return None if value in ("all", "auto") else f"must be a number of layers, 'all' or 'auto', not {value!r}"


IMPLICIT_KEYS = ("alias", "host", "port")  # what llama-server does with no flag and no variable


def reported_model_id(model: str | None, hf_repo: str | None) -> str | None:
    """The id llama-server serves in /v1/models when it is given no --alias: the -hf repo as given
    (`user/repo:quant`), else the model path as given (`/models/X.gguf`, not its file name).
    llama.cpp's server-context.cpp takes `common_params_model::get_name()`, which returns hf_repo,
    else path; checked against the pinned build's /v1/models (tests/system/test_served_id.py)."""
    return hf_repo or model or None


def _implicit_keys(value: Any) -> str | None:
    problem = list_of_strings(value)
    if problem:
        return problem
    flagged = {key.name for key in KEYS if key.flags and key.table == "top"}
    wrong = [item for item in value if item not in flagged]
    if wrong:
        return f"may name only keys that are llama-server flags ({', '.join(IMPLICIT_KEYS)}, ...), not " + \
            ", ".join(map(repr, wrong))
    return None if len(set(value)) == len(value) else "names a key twice"


Where = Literal["top", "speculative"]


@dataclass(frozen=True)
class ProfileKey:
    """One key of a profile file."""

    name: str
    kind: type | tuple[type, ...]
    doc: str
    check: Check | None = None
    flags: tuple[str, ...] = ()  # llama-server's spellings, the one specd writes first; () = not a flag
    default: Any = None  # None: absent unless set
    path: bool = False  # `~` and `${SPECD_CACHE}` are expanded
    table: Where = "top"

    @property
    def schema_key(self) -> Key:
        return Key(self.kind, self.check, self.doc)


def _flag(name: str, kind: type | tuple[type, ...], doc: str, flags: tuple[str, ...], check: Check | None = None,
          **extra: Any) -> ProfileKey:
    return ProfileKey(name, kind, doc, check, flags, **extra)


KEYS: tuple[ProfileKey, ...] = (
    ProfileKey("description", str, "one line shown by `specd profiles`", default=""),
    ProfileKey("inherits", str, "a profile in the same directory whose keys this one starts from",
               matches(NAME_PATTERN, "a profile name")),
    ProfileKey("abstract", bool, "a base for others; never switched to", default=False),
    ProfileKey("engine", str, "the server: llama-server, or vllm (`vllm serve`, its options in [vllm]; "
               "see the README's vLLM section)", ENGINE_KEY.check, default=DEFAULT_ENGINE),
    ProfileKey("binary", str, "llama-server (a fork's too): absolute path or a name in systemd's PATH", _BINARY,
               path=True),
    ProfileKey("launcher", list, "words run in front of the binary: toolbox run -c BOX, numactl ...",
               list_of_strings, default=()),
    ProfileKey("binary_args", list, "words the binary takes before its flags, kept in their place: a subcommand "
               "(`llama serve`), a wrapper script's own arguments (`launch.sh rocm qwen`)", list_of_strings,
               default=()),
    # Where the model comes from: exactly one of model, hf_repo, router mode (models_dir/models_preset/router).
    _flag("model", str, "a local GGUF file", ("--model", "-m"), _SERVER_PATH, path=True),
    _flag("hf_repo", str, "a model from Hugging Face, downloaded on first start", ("--hf-repo", "-hf", "-hfr"),
          _HF_REPO),
    _flag("hf_file", str, "the file in hf_repo, instead of the quant", ("--hf-file", "-hff")),
    _flag("models_dir", str, "router mode: a directory of GGUF files", ("--models-dir",), _SERVER_PATH, path=True),
    _flag("models_preset", str, "router mode: an INI file of model presets", ("--models-preset",), _SERVER_PATH,
          path=True),
    ProfileKey("router", bool, "router mode with neither models_dir nor models_preset: llama-server (a build "
               "with --models-dir) serves the models of its download cache ($LLAMA_CACHE, "
               "~/.cache/huggingface/hub), as it "
               "does when no model is given",
               default=False),
    _flag("models_max", int, "router mode: models loaded at once", ("--models-max",), in_range(0, 1024)),
    _flag("alias", str, "the model name clients ask for (several: comma-separated; the gate asks for the first)",
          ("--alias", "-a"), _ALIAS),
    _flag("host", str, "the address llama-server listens on; a path ending in .sock: a Unix socket (no port; "
          "switch by restart only: blue-green, the proxy, routing and the bench need a TCP port)", ("--host",),
          _HOST, default="127.0.0.1"),
    _flag("port", int, "its port (required, unless host is a Unix socket, which has none)", ("--port",),
          in_range(1, 65535)),
    ProfileKey("implicit", list, "keys the server gets without their flag: from their LLAMA_ARG_* variable in [env]; "
               "'host' and 'port' from the binary's defaults (its --help says which); 'alias' as the id llama-server "
               "reports with no --alias (the model path, or the -hf repo, as given). The flag is written only where "
               "the server would not get the value by itself (another build, an inheriting profile's other model), "
               "so clients keep the same id, host and port",
               _implicit_keys, default=()),
    _flag("api_key", str, "clients must send it; the gate, bench and verify do; rendered as a 0600 key file, "
          "never into the unit or history", ("--api-key",)),
    _flag("api_key_file", str, "a file of API keys, one per line", ("--api-key-file",), _SERVER_PATH, path=True),
    _flag("ctx_size", int, "context size in tokens", ("--ctx-size", "-c"), in_range(0, 1 << 24)),
    _flag("n_gpu_layers", (int, str), "layers on the GPU: a number, 'all' or 'auto'",
          ("--n-gpu-layers", "--gpu-layers", "-ngl"), _layers),
    _flag("threads", int, "CPU threads", ("--threads", "-t"), in_range(1, 1024)),
    _flag("parallel", int, "server slots (concurrent requests)", ("--parallel", "-np"), in_range(1, 1024)),
    _flag("batch_size", int, "logical batch size", ("--batch-size", "-b"), in_range(1, 1 << 20)),
    _flag("ubatch_size", int, "physical batch size", ("--ubatch-size", "-ub"), in_range(1, 1 << 20)),
    _flag("flash_attn", str, "on, off, auto (or what the binary's --help offers)", ("--flash-attn", "-fa"),
          _TOKEN),
    _flag("cache_type_k", str, "KV cache type for K (f16, q8_0, q4_0, a fork's turbo4 ...)",
          ("--cache-type-k", "-ctk"), _TOKEN),
    _flag("cache_type_v", str, "KV cache type for V", ("--cache-type-v", "-ctv"), _TOKEN),
    _flag("reasoning_budget", int, "thinking tokens (-1: unlimited)", ("--reasoning-budget",),
          in_range(-1, 1 << 20)),
    _flag("jinja", bool, "use the model's chat template", ("--jinja",), default=False),
    _flag("metrics", bool, "serve /metrics (Prometheus)", ("--metrics",), default=True),
    ProfileKey("args", list, "any other llama-server arguments, passed as written", list_of_strings, default=()),
    ProfileKey("health_timeout_s", float, "how long the health gate waits for the server to load",
               in_range(1, 24 * 3600), default=600.0),
    ProfileKey("stability_s", float, "how long the server must stay up after the gate passes",
               in_range(0, 600), default=5.0),
    # [speculative]
    _flag("type", str, "speculative decoding: specd's name (mtp, draft, dflash, ngram-mod ...), the binary's "
          "spelling, a chain or parameters", ("--spec-type",), _SPEC_TYPE, default="none", table="speculative"),
    _flag("draft_n_max", int, "most tokens drafted per step", ("--spec-draft-n-max", "--draft-max", "--draft-n-max"),
          in_range(0, 256), table="speculative"),
    _flag("draft_n_min", int, "fewest tokens drafted per step",
          ("--spec-draft-n-min", "--draft-min", "--draft-n-min"), in_range(0, 256), table="speculative"),
    _flag("draft_p_min", float, "a draft token's lowest probability", ("--spec-draft-p-min", "--draft-p-min"),
          in_range(0.0, 1.0), table="speculative"),
    _flag("draft_model", str, "the draft model's GGUF file", ("--spec-draft-model", "--model-draft", "-md"),
          _SERVER_PATH, path=True, table="speculative"),
    _flag("draft_ngl", (int, str), "the draft model's GPU layers",
          ("--spec-draft-ngl", "--n-gpu-layers-draft", "-ngld"), _layers, table="speculative"),
    _flag("draft_hf_repo", str, "the draft model from Hugging Face", ("--spec-draft-hf", "--hf-repo-draft", "-hfd"),
          _HF_REPO, table="speculative"),
    # The n-gram speculators' own sizes: one key per flag, as each type has its own (llama.cpp 2026).
    _flag("ngram_simple_size_n", int, "ngram-simple: lookup n-gram length", ("--spec-ngram-simple-size-n",),
          in_range(1, 1024), table="speculative"),
    _flag("ngram_simple_size_m", int, "ngram-simple: draft m-gram length", ("--spec-ngram-simple-size-m",),
          in_range(1, 1024), table="speculative"),
    _flag("ngram_simple_min_hits", int, "ngram-simple: hits before a draft", ("--spec-ngram-simple-min-hits",),
          in_range(1, 1024), table="speculative"),
    _flag("ngram_mod_n_match", int, "ngram-mod: lookup length", ("--spec-ngram-mod-n-match",), in_range(1, 1024),
          table="speculative"),
    _flag("ngram_mod_n_min", int, "ngram-mod: fewest tokens drafted", ("--spec-ngram-mod-n-min",), in_range(0, 1024),
          table="speculative"),
    _flag("ngram_mod_n_max", int, "ngram-mod: most tokens drafted", ("--spec-ngram-mod-n-max",), in_range(1, 1024),
          table="speculative"),
    # An engine that tunes its own draft settings while it serves (ik_llama.cpp PR #1595).
    _flag("autotune", bool, "let the engine tune n_max/n_min/p_min as it serves (ik_llama.cpp `--spec-autotune`); "
          "a sweep benches it as one more variant where the binary offers it", ("--spec-autotune",), default=False,
          table="speculative"),
)

TOP_KEYS = tuple(k for k in KEYS if k.table == "top")
SPECULATIVE_KEYS = tuple(k for k in KEYS if k.table == "speculative")
BY_FLAG: dict[str, ProfileKey] = {spelling: key for key in KEYS for spelling in key.flags}
BY_NAME: dict[str, ProfileKey] = {key.name: key for key in TOP_KEYS}


def _directive_values(value: Any) -> str | None:
    return list_of_strings(value) if isinstance(value, list) else None


_SECTION = Table(keys={}, free_form=Key((str, list), _directive_values))
SYSTEMD_SCHEMA = Table(keys={}, tables={"Unit": _SECTION, "Service": _SECTION, "Install": _SECTION})
SPECULATIVE_SCHEMA = Table(keys={k.name: k.schema_key for k in SPECULATIVE_KEYS})
PROFILE_SCHEMA = Table(
    keys={k.name: k.schema_key for k in TOP_KEYS},
    tables={
        "speculative": SPECULATIVE_SCHEMA,
        "env": Table(keys={}, free_form=Key(str, doc="environment variables of the server (LLAMA_ARG_* are settings)")),
        "systemd": SYSTEMD_SCHEMA,
        "vllm": VLLM_SCHEMA,  # specd.profiles.engine_keys
    },
)
REQUIRED = ("binary",)  # and "port" for a TCP host: load.check_endpoint
MODEL_SOURCES = ("model", "hf_repo", "models_dir", "models_preset")


def key_table() -> str:
    """The README's table of profile keys, in Markdown."""
    rows = ["| key | flag | default | meaning |", "|---|---|---|---|"]
    for key in KEYS:
        name = f"speculative.{key.name}" if key.table == "speculative" else key.name
        flag = f"`{key.flags[0]}`" if key.flags else ""
        default = f"`{key.default!r}`" if key.default not in (None, (), "") else ""
        required = "required" if key.name in REQUIRED else default
        rows.append(f"| `{name}` | {flag} | {required} | {key.doc} |")
    return "\n".join(rows) + "\n"
