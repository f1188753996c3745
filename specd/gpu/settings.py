"""The llama-server settings that decide VRAM, read from the command line a unit will run.

A profile reaches llama-server as flags (its keys, rendered) plus whatever its `args` and `[env]`
add (`--n-cpu-moe 20`, `LLAMA_ARG_SPLIT_MODE=row`, `CUDA_VISIBLE_DEVICES=1`). Reading the final
argv and environment is the one way to see all of them, whichever way the profile spelled them.
Spellings are matched through the binary's own `--help` groups when known (`-c` = `--ctx-size`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from specd.errors import PreflightError
from specd.profiles.flags import BinaryFlags

SplitMode = Literal["none", "layer", "row", "tensor"]
SPLIT_MODES: tuple[SplitMode, ...] = ("none", "layer", "row", "tensor")
# how tensor split's GPUs add up their partial sums (ggml-cuda.cu comm_init: GGML_CUDA_ALLREDUCE, by
# default NCCL on Linux where the binary has it, else llama.cpp's internal two-GPU pipeline)
AllReduce = Literal["nccl", "internal", "none"]
DEFAULT_UBATCH = 512
DEFAULT_DRAFT_N_MAX = 3        # common/common.h common_params_speculative_draft::n_max
# speculative types whose target context keeps n_max recurrent-state snapshots (common.h need_n_rs_seq)
ROLLBACK_TYPES = frozenset({"draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark"})
_TYPE_NAMES = {"mtp": "draft-mtp", "dflash": "draft-dflash", "eagle3": "draft-eagle3", "dspark": "draft-dspark",
               "draft": "draft-simple"}


@dataclass(frozen=True)
class ServerSettings:
    """What llama-server is told, in the estimator's terms (None = the server's default)."""

    ctx_size: int = 0                    # 0: the model's training context
    n_gpu_layers: int | None = None      # None: all (-ngl all/auto/-1 and up)
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    n_parallel: int | None = None        # None: auto (4 slots, unified KV)
    n_ubatch: int = DEFAULT_UBATCH
    kv_unified: bool | None = None
    flash_attn: bool = True              # `-fa off` is False; auto turns it on with CUDA
    spec_types: tuple[str, ...] = ()     # draft-mtp, draft-simple, draft-dflash, ... (canonical spelling)
    draft_n_max: int = DEFAULT_DRAFT_N_MAX
    draft_n_gpu_layers: int | None = None
    draft_cache_type_k: str = "f16"
    draft_cache_type_v: str = "f16"
    cpu_moe: bool = False                # --cpu-moe: every layer's experts in host memory
    n_cpu_moe: int = 0                   # --n-cpu-moe N: the first N layers' experts
    draft_cpu_moe: bool = False
    draft_n_cpu_moe: int = 0
    split_mode: SplitMode = "layer"
    tensor_split: tuple[float, ...] = ()
    main_gpu: int = 0
    devices: tuple[int, ...] | None = None        # -dev CUDA0,CUDA1: CUDA indices the model may use
    draft_devices: tuple[int, ...] | None = None  # -devd
    visible_devices: tuple[str, ...] | None = field(default=None)  # CUDA_VISIBLE_DEVICES, as written
    allreduce: AllReduce = "nccl"        # GGML_CUDA_ALLREDUCE; "nccl" also where the binary may have it

    @property
    def mtp(self) -> bool:
        return "draft-mtp" in self.spec_types

    @property
    def n_rs_seq(self) -> int:
        """Recurrent-state snapshots per sequence the target keeps for speculative rollback."""
        return self.draft_n_max if ROLLBACK_TYPES & set(self.spec_types) else 0

    def expert_on_cpu(self, layer: int, *, draft: bool = False) -> bool:
        if draft:
            return self.draft_cpu_moe or layer < self.draft_n_cpu_moe
        return self.cpu_moe or layer < self.n_cpu_moe


# option -> (spellings llama.cpp gives it, the LLAMA_ARG_* variable that sets it)
_OPTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "ctx_size": (("-c", "--ctx-size"), "LLAMA_ARG_CTX_SIZE"),
    "n_gpu_layers": (("-ngl", "--gpu-layers", "--n-gpu-layers"), "LLAMA_ARG_N_GPU_LAYERS"),
    "cache_type_k": (("-ctk", "--cache-type-k"), "LLAMA_ARG_CACHE_TYPE_K"),
    "cache_type_v": (("-ctv", "--cache-type-v"), "LLAMA_ARG_CACHE_TYPE_V"),
    "n_parallel": (("-np", "--parallel"), "LLAMA_ARG_N_PARALLEL"),
    "n_ubatch": (("-ub", "--ubatch-size"), "LLAMA_ARG_UBATCH"),
    "kv_unified": (("-kvu", "--kv-unified"), "LLAMA_ARG_KV_UNIFIED"),
    "flash_attn": (("-fa", "--flash-attn"), "LLAMA_ARG_FLASH_ATTN"),
    "spec_type": (("--spec-type",), "LLAMA_ARG_SPEC_TYPE"),
    "draft_n_max": (("--spec-draft-n-max",), "LLAMA_ARG_SPEC_DRAFT_N_MAX"),
    "draft_model": (("--spec-draft-model", "-md", "--model-draft"), "LLAMA_ARG_SPEC_DRAFT_MODEL"),
    "draft_n_gpu_layers": (("--spec-draft-ngl", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"),
                           "LLAMA_ARG_N_GPU_LAYERS_DRAFT"),
    "draft_cache_type_k": (("--spec-draft-type-k", "-ctkd", "--cache-type-k-draft"),
                           "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K"),
    "draft_cache_type_v": (("--spec-draft-type-v", "-ctvd", "--cache-type-v-draft"),
                           "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V"),
    "cpu_moe": (("-cmoe", "--cpu-moe"), "LLAMA_ARG_CPU_MOE"),
    "n_cpu_moe": (("-ncmoe", "--n-cpu-moe"), "LLAMA_ARG_N_CPU_MOE"),
    "draft_cpu_moe": (("--spec-draft-cpu-moe", "-cmoed", "--cpu-moe-draft"), "LLAMA_ARG_SPEC_DRAFT_CPU_MOE"),
    "draft_n_cpu_moe": (("--spec-draft-n-cpu-moe", "--spec-draft-ncmoe", "-ncmoed", "--n-cpu-moe-draft"),
                        "LLAMA_ARG_SPEC_DRAFT_N_CPU_MOE"),
    "split_mode": (("-sm", "--split-mode"), "LLAMA_ARG_SPLIT_MODE"),
    "tensor_split": (("-ts", "--tensor-split"), "LLAMA_ARG_TENSOR_SPLIT"),
    "main_gpu": (("-mg", "--main-gpu"), "LLAMA_ARG_MAIN_GPU"),
    "devices": (("-dev", "--device"), "LLAMA_ARG_DEVICE"),
    "draft_devices": (("--spec-draft-device", "-devd", "--device-draft"), ""),   # no variable
}
_SWITCHES = frozenset({"cpu_moe", "draft_cpu_moe", "kv_unified"})
_NEGATIONS = {"-no-kvu": "kv_unified", "--no-kv-unified": "kv_unified"}


def _option_of(word: str, flags: BinaryFlags | None) -> str | None:
    name = word.split("=", 1)[0]
    for option, (spellings, _) in _OPTIONS.items():
        if name in spellings or (flags is not None and flags.has(name)
                                 and any(flags.canonical(name) == flags.canonical(s) for s in spellings)):
            return option
    return None


def _raw_values(argv: Sequence[str], env: Mapping[str, str], flags: BinaryFlags | None) -> dict[str, str]:
    """option -> value as written; a flag on the command line wins over its LLAMA_ARG_* variable."""
    raw = {option: env[variable] for option, (_, variable) in _OPTIONS.items() if variable and variable in env}
    words = list(argv[1:])
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if word in _NEGATIONS:
            raw[_NEGATIONS[word]] = "off"
            continue
        option = _option_of(word, flags) if word.startswith("-") else None
        if option is None:
            continue
        if option in _SWITCHES:
            raw[option] = "on"
        elif "=" in word:
            raw[option] = word.split("=", 1)[1]
        elif index < len(words):
            raw[option] = words[index]
            index += 1
    return raw


def _layers(value: str, where: str) -> int | None:
    if value in ("all", "auto"):
        return None
    number = _int(value, where)
    return None if number < 0 else number


def _int(value: str, where: str) -> int:
    try:
        return int(value)
    except ValueError as exc:
        raise PreflightError(f"{where}: '{value}' is not a whole number") from exc


def _devices(value: str) -> tuple[int, ...]:
    """`-dev CUDA0,CUDA1` -> (0, 1); `none` or a non-CUDA device -> ()."""
    found = []
    for part in value.split(","):
        part = part.strip()
        if part.upper().startswith("CUDA") and part[4:].isdigit():
            found.append(int(part[4:]))
    return tuple(found)


def _truthy(value: str) -> bool:
    return value.lower() in ("1", "on", "true", "yes", "enabled")


def _allreduce(value: str) -> AllReduce:
    """GGML_CUDA_ALLREDUCE as llama.cpp takes it: an unknown value warns and falls back to "none"."""
    if value == "nccl":
        return "nccl"
    return "internal" if value == "internal" else "none"


def settings_from_argv(argv: Sequence[str], env: Mapping[str, str] | None = None,
                       flags: BinaryFlags | None = None) -> ServerSettings:
    """The memory-relevant settings of `llama-server argv...` run with `env` ([env] of the profile)."""
    env = env or {}
    raw = _raw_values(argv, env, flags)

    def text(option: str, default: str) -> str:
        return raw.get(option, default)

    split = text("split_mode", "layer")
    if split not in SPLIT_MODES:
        raise PreflightError(f"--split-mode '{split}' is not one of {', '.join(SPLIT_MODES)}")
    types = tuple(_TYPE_NAMES.get(part.split(":", 1)[0], part.split(":", 1)[0])
                  for part in text("spec_type", "").split(",") if part and "=" not in part.split(":", 1)[0])
    if "draft_model" in raw and not types:
        types = ("draft-simple",)
    visible = env.get("CUDA_VISIBLE_DEVICES")
    return ServerSettings(
        ctx_size=_int(text("ctx_size", "0"), "--ctx-size"),
        n_gpu_layers=_layers(text("n_gpu_layers", "all"), "--n-gpu-layers"),
        cache_type_k=text("cache_type_k", "f16"), cache_type_v=text("cache_type_v", "f16"),
        n_parallel=(None if _int(text("n_parallel", "-1"), "--parallel") < 0
                    else _int(text("n_parallel", "-1"), "--parallel")),
        n_ubatch=_int(text("n_ubatch", str(DEFAULT_UBATCH)), "--ubatch-size"),
        kv_unified=_truthy(raw["kv_unified"]) if "kv_unified" in raw else None,
        flash_attn=text("flash_attn", "auto").lower() not in ("off", "0", "false", "disabled"),
        spec_types=types, draft_n_max=_int(text("draft_n_max", str(DEFAULT_DRAFT_N_MAX)), "--spec-draft-n-max"),
        draft_n_gpu_layers=_layers(text("draft_n_gpu_layers", "all"), "--spec-draft-ngl"),
        draft_cache_type_k=text("draft_cache_type_k", "f16"), draft_cache_type_v=text("draft_cache_type_v", "f16"),
        cpu_moe=_truthy(raw["cpu_moe"]) if "cpu_moe" in raw else False,
        n_cpu_moe=_int(text("n_cpu_moe", "0"), "--n-cpu-moe"),
        draft_cpu_moe=_truthy(raw["draft_cpu_moe"]) if "draft_cpu_moe" in raw else False,
        draft_n_cpu_moe=_int(text("draft_n_cpu_moe", "0"), "--spec-draft-n-cpu-moe"),
        split_mode=split,
        tensor_split=tuple(float(part) for part in text("tensor_split", "").replace("/", ",").split(",") if part),
        main_gpu=_int(text("main_gpu", "0"), "--main-gpu"),
        devices=_devices(raw["devices"]) if "devices" in raw else None,
        draft_devices=_devices(raw["draft_devices"]) if "draft_devices" in raw else None,
        visible_devices=tuple(part.strip() for part in visible.split(",")) if visible is not None else None,
        allreduce=_allreduce(env.get("GGML_CUDA_ALLREDUCE", "nccl")),
    )
