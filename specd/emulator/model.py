"""What specd-emulator models of llama-server: how long a request takes, and its command line.

Pure and deterministic: the server (specd.emulator.server) owns the clock, the slots and the noise RNG
and asks this module for modelled milliseconds and llama-server-shaped payloads. The numbers live
in a TOML file so a test, or a user with other hardware, can swap them; the shipped one is taken
from the seed articles (specd/data/emulator/seeds-3090ti.toml says where each figure comes from).
The accepted flags live in data/emulator/options.toml, laid out in --help as llama-server does.
"""

from __future__ import annotations

import itertools
import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specd.errors import UsageError
from specd.traffic.taskclass import TASK_CLASSES, TaskClass

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "emulator"
DEFAULT_CONFIG = DATA_DIR / "seeds-3090ti.toml"

Points = tuple[tuple[float, float], ...]

# llama-server --spec-type spellings (and older/fork spellings) -> the model's mode key.
SPEC_TYPE_MODES: dict[str, str] = {
    "none": "none",
    "draft-mtp": "mtp", "mtp": "mtp",
    "draft-dflash": "dflash", "dflash": "dflash",
    "draft-simple": "draft", "draft": "draft", "draft-eagle3": "draft", "draft-dspark": "draft",
    "ngram-simple": "ngram", "ngram-map-k": "ngram", "ngram-map-k4v": "ngram", "ngram-mod": "ngram",
    "ngram-cache": "ngram",
}

_MODE_KEYS = {
    "load_time_s", "prefill_points", "decode_points", "class_factor", "acceptance", "draft_n_max",
    "batch_penalty", "repeat_factor", "repeat_acceptance", "draft_fraction", "draft_step_cost", "note",
}
_TOP_KEYS = {
    "name", "noise_sigma", "seed", "chars_per_token", "default_max_tokens", "reference_class", "note",
}



@dataclass(frozen=True)
class ModeModel:
    """One speculative mode: prefill and decode curves, task and batching dependence."""

    name: str
    load_time_s: float
    prefill_points: Points  # (prompt tokens evaluated, tokens/s)
    decode_points: Points  # (output tokens, average decode tokens/s) for the reference class
    class_factor: Mapping[TaskClass, float]
    acceptance: Mapping[TaskClass, float]  # empty: this mode never drafts
    draft_n_max: int
    batch_penalty: float  # per-stream decode rate / (1 + batch_penalty * (in_flight - 1))
    repeat_factor: float  # decode multiplier when the answer repeats the prompt (n-gram wins)
    repeat_acceptance: float
    draft_fraction: float  # share of decode steps that draft at all (n-gram drafts only on a match)
    draft_step_cost: float = 0.0  # one drafted token's cost in target decode steps; 0: draft length not modelled

    @property
    def speculative(self) -> bool:
        return bool(self.acceptance)


@dataclass(frozen=True)
class EmulatorModel:
    name: str
    path: Path
    noise_sigma: float
    seed: int
    chars_per_token: float
    default_max_tokens: int
    modes: Mapping[str, ModeModel]

    def mode(self, key: str) -> ModeModel:
        if key not in self.modes:
            raise UsageError(
                f"{self.path}: the emulator config has no [mode.{key}]",
                hint=f"it models: {', '.join(sorted(self.modes))}",
            )
        return self.modes[key]


@dataclass(frozen=True)
class RequestTiming:
    """Modelled, unscaled timings of one request, in llama-server's terms."""

    prompt_n: int
    cache_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    draft_n: int | None
    draft_n_accepted: int | None

    @property
    def wall_ms(self) -> float:
        return self.prompt_ms + self.predicted_ms


def interpolate(points: Sequence[tuple[float, float]], x: float) -> float:
    """Piecewise-linear through the points, flat beyond either end (no extrapolated cliffs)."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def mode_for_spec_types(spec_types: Sequence[str], has_draft_model: bool) -> str:
    """The mode a llama-server command line selects: the first speculative type named wins."""
    for spec_type in spec_types:
        if spec_type not in SPEC_TYPE_MODES:
            raise UsageError(f"unknown speculative decoding type: {spec_type}")
        if SPEC_TYPE_MODES[spec_type] != "none":
            return SPEC_TYPE_MODES[spec_type]
    return "draft" if has_draft_model else "none"


def tokens_per_cost(alpha: float, n_max: int, step_cost: float) -> float:
    """Tokens a verify step yields per unit of cost with drafts of `n_max` tokens, each accepted with
    probability `alpha` until the first miss (the standard speculative-decoding expectation,
    (1 - alpha^(k+1)) / (1 - alpha)), over the step's cost 1 + step_cost * k. Longer drafts pay
    only while acceptance is high: the optimum k grows with alpha."""
    expected = n_max + 1.0 if alpha >= 1.0 else (1.0 - alpha ** (n_max + 1)) / (1.0 - alpha)
    return expected / (1.0 + step_cost * n_max)


def decode_rate(mode: ModeModel, output_tokens: int, task_class: TaskClass, in_flight: int = 1,
                repeats_input: bool = False, draft_n_max: int | None = None) -> float:
    """Per-stream decode tokens/s for a request of this shape with `in_flight` requests decoding.

    The decode curves were measured at the mode's own draft length; another `draft_n_max` scales them
    by `tokens_per_cost` at the class's acceptance (modes with a draft_step_cost only)."""
    rate = interpolate(mode.decode_points, max(output_tokens, 1)) * mode.class_factor[task_class]
    if repeats_input:
        rate *= mode.repeat_factor
    if mode.speculative and mode.draft_step_cost > 0 and draft_n_max is not None and draft_n_max != mode.draft_n_max:
        alpha = mode.repeat_acceptance if repeats_input else mode.acceptance[task_class]
        rate *= (tokens_per_cost(alpha, max(draft_n_max, 1), mode.draft_step_cost)
                 / tokens_per_cost(alpha, mode.draft_n_max, mode.draft_step_cost))
    return rate / (1.0 + mode.batch_penalty * (max(in_flight, 1) - 1))


def prefill_ms(mode: ModeModel, prompt_n: int) -> float:
    if prompt_n <= 0:
        return 0.0
    return 1000.0 * prompt_n / interpolate(mode.prefill_points, prompt_n)


def plan_request(
    mode: ModeModel, *, prompt_tokens: int, cache_n: int, output_tokens: int, task_class: TaskClass,
    in_flight: int = 1, repeats_input: bool = False, draft_n_max: int | None = None,
    prefill_noise: float = 1.0, decode_noise: float = 1.0,
) -> RequestTiming:
    """Timings for one request; noise factors come from the caller's seeded RNG."""
    cache_n = max(0, min(cache_n, prompt_tokens - 1))
    prompt_n = prompt_tokens - cache_n
    rate = decode_rate(mode, output_tokens, task_class, in_flight, repeats_input, draft_n_max)
    predicted_ms = 1000.0 * output_tokens / rate * decode_noise if output_tokens > 0 else 0.0
    draft_n: int | None = None
    accepted: int | None = None
    if mode.speculative and output_tokens > 0:
        alpha = mode.repeat_acceptance if repeats_input else mode.acceptance[task_class]
        n_max = max(1, draft_n_max if draft_n_max is not None else mode.draft_n_max)
        fraction = 1.0 if repeats_input else mode.draft_fraction
        steps = output_tokens / (1.0 + alpha * n_max * fraction)
        draft_n = round(steps * n_max * fraction)
        accepted = round(draft_n * alpha)
    return RequestTiming(
        prompt_n=prompt_n, cache_n=cache_n, prompt_ms=prefill_ms(mode, prompt_n) * prefill_noise,
        predicted_n=output_tokens, predicted_ms=predicted_ms, draft_n=draft_n, draft_n_accepted=accepted,
    )


def expected_wall_ms(mode: ModeModel, prompt_tokens: int, output_tokens: int, task_class: TaskClass,
                     in_flight: int = 1, repeats_input: bool = False) -> float:
    """Noise-free cold-cache wall clock (prefill + decode): what calibration is checked against."""
    timing = plan_request(mode, prompt_tokens=prompt_tokens, cache_n=0, output_tokens=output_tokens,
                          task_class=task_class, in_flight=in_flight, repeats_input=repeats_input)
    return timing.wall_ms


def _fail(path: Path, where: str, problem: str) -> UsageError:
    return UsageError(f"{path}: {where}: {problem}")


def _number(path: Path, where: str, value: Any, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(path, where, f"expected a number, got {value!r}")
    if value < minimum:
        raise _fail(path, where, f"must be at least {minimum}, got {value}")
    return float(value)


def _points(path: Path, where: str, value: Any) -> Points:
    if not isinstance(value, list) or not value:
        raise _fail(path, where, "expected a non-empty list of [x, rate] pairs")
    points: list[tuple[float, float]] = []
    for index, pair in enumerate(value):
        if not isinstance(pair, list) or len(pair) != 2:
            raise _fail(path, f"{where}[{index}]", "expected an [x, rate] pair")
        x = _number(path, f"{where}[{index}]", pair[0])
        rate = _number(path, f"{where}[{index}]", pair[1])
        if rate <= 0.0:
            raise _fail(path, f"{where}[{index}]", "rate must be positive")
        if points and x <= points[-1][0]:
            raise _fail(path, f"{where}[{index}]", "x values must increase")
        points.append((x, rate))
    return tuple(points)


def _per_class(path: Path, where: str, value: Any, default: float | None) -> dict[TaskClass, float]:
    table = value if value is not None else {}
    if not isinstance(table, dict):
        raise _fail(path, where, "expected a table keyed by task class")
    unknown = sorted(set(table) - set(TASK_CLASSES))
    if unknown:
        raise _fail(path, where, f"unknown task class {unknown[0]!r} (known: {', '.join(TASK_CLASSES)})")
    result: dict[TaskClass, float] = {}
    for task_class in TASK_CLASSES:
        if task_class in table:
            result[task_class] = _number(path, f"{where}.{task_class}", table[task_class])
        elif default is not None:
            result[task_class] = default
        else:
            raise _fail(path, where, f"missing task class {task_class!r}")
    return result


def _mode(path: Path, name: str, raw: Any) -> ModeModel:
    where = f"mode.{name}"
    if not isinstance(raw, dict):
        raise _fail(path, where, "expected a table")
    unknown = sorted(set(raw) - _MODE_KEYS)
    if unknown:
        raise _fail(path, where, f"unknown key {unknown[0]!r}")
    for key in ("load_time_s", "prefill_points", "decode_points"):
        if key not in raw:
            raise _fail(path, where, f"missing key {key!r}")
    repeat_acceptance = _number(path, f"{where}.repeat_acceptance", raw.get("repeat_acceptance", 0.9))
    given = raw.get("acceptance")
    if isinstance(given, dict) and "edit" not in given:  # an edit's answer repeats its input: repeat_acceptance
        given = {**given, "edit": repeat_acceptance}
    acceptance = _per_class(path, f"{where}.acceptance", given, None) if "acceptance" in raw else {}
    if any(a > 1.0 for a in acceptance.values()):
        raise _fail(path, f"{where}.acceptance", "acceptance is a fraction between 0 and 1")
    return ModeModel(
        name=name,
        load_time_s=_number(path, f"{where}.load_time_s", raw["load_time_s"]),
        prefill_points=_points(path, f"{where}.prefill_points", raw["prefill_points"]),
        decode_points=_points(path, f"{where}.decode_points", raw["decode_points"]),
        class_factor=_per_class(path, f"{where}.class_factor", raw.get("class_factor"), 1.0),
        acceptance=acceptance,
        draft_n_max=int(_number(path, f"{where}.draft_n_max", raw.get("draft_n_max", 3), 1.0)),
        batch_penalty=_number(path, f"{where}.batch_penalty", raw.get("batch_penalty", 0.0)),
        repeat_factor=_number(path, f"{where}.repeat_factor", raw.get("repeat_factor", 1.0)),
        repeat_acceptance=repeat_acceptance,
        draft_fraction=_number(path, f"{where}.draft_fraction", raw.get("draft_fraction", 1.0)),
        draft_step_cost=_number(path, f"{where}.draft_step_cost", raw.get("draft_step_cost", 0.0)),
    )


def load_model(path: Path | str | None = None) -> EmulatorModel:
    """Read and validate a performance-model TOML; every problem names the file and the key."""
    source = Path(path) if path is not None else DEFAULT_CONFIG
    try:
        raw = tomllib.loads(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{source}: cannot read emulator config: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{source}: not valid TOML: {exc}") from exc
    top = raw.get("emulator", {})
    if not isinstance(top, dict):
        raise _fail(source, "emulator", "expected a table")
    unknown = sorted((set(top) - _TOP_KEYS) | (set(raw) - {"emulator", "mode"}))
    if unknown:
        raise _fail(source, "emulator", f"unknown key {unknown[0]!r}")
    modes_raw = raw.get("mode", {})
    if not isinstance(modes_raw, dict) or "none" not in modes_raw:
        raise _fail(source, "mode", "needs at least [mode.none], the plain autoregressive baseline")
    modes = {name: _mode(source, name, body) for name, body in modes_raw.items()}
    return EmulatorModel(
        name=str(top.get("name", source.stem)),
        path=source,
        noise_sigma=_number(source, "emulator.noise_sigma", top.get("noise_sigma", 0.0)),
        seed=int(_number(source, "emulator.seed", top.get("seed", 0))),
        chars_per_token=_number(source, "emulator.chars_per_token", top.get("chars_per_token", 4.0), 0.5),
        default_max_tokens=int(_number(source, "emulator.default_max_tokens",
                                       top.get("default_max_tokens", 256), 1)),
        modes=modes,
    )


def timings_json(t: RequestTiming) -> dict[str, Any]:
    """llama-server's `timings` object; draft fields only when speculation drafted something."""
    result: dict[str, Any] = {
        "cache_n": t.cache_n, "prompt_n": t.prompt_n, "prompt_ms": round(t.prompt_ms, 3),
        "prompt_per_token_ms": round(t.prompt_ms / t.prompt_n, 3) if t.prompt_n else 0.0,
        "prompt_per_second": round(1000.0 * t.prompt_n / t.prompt_ms, 3) if t.prompt_ms else 0.0,
        "predicted_n": t.predicted_n, "predicted_ms": round(t.predicted_ms, 3),
        "predicted_per_token_ms": round(t.predicted_ms / t.predicted_n, 3) if t.predicted_n else 0.0,
        "predicted_per_second": round(1000.0 * t.predicted_n / t.predicted_ms, 3) if t.predicted_ms else 0.0,
    }
    if t.draft_n:
        result["draft_n"] = t.draft_n
        result["draft_n_accepted"] = t.draft_n_accepted
    return result


_PROSE = (" the", " and", " of", " to", " a", " in", " that", " is", " it", " was", " for", " on", " with")
_CODE = ("def", " f", "(x", "):", "\n   ", " return", " x", " +", " 1", "\n", "if", " not", " y", ":")


def output_pieces(n: int, task_class: TaskClass) -> list[str]:
    """Deterministic filler of exactly n tokens: only the answer's length and timing are modelled."""
    vocabulary = _CODE if task_class == "code" else _PROSE
    return [vocabulary[i % len(vocabulary)] for i in range(n)]


def requested_tokens(body: Mapping[str, Any], default: int) -> int:
    """Output length: the request's max_tokens (or its aliases), else the config's default."""
    for key in ("max_tokens", "max_completion_tokens", "n_predict"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return default


def prompt_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """A stand-in for the chat template: what a slot caches and its prefix match runs over."""
    parts = []
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        parts.append(f"<|im_start|>{message.get('role', 'user')}\n{text}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n"


def prometheus_text(counters: Mapping[str, float], gauges: Mapping[str, float]) -> str:
    """/metrics in llama-server's exposition: `llamacpp:` names, HELP and TYPE lines."""
    lines = []
    for kind, items in (("counter", counters), ("gauge", gauges)):
        for name, value in items.items():
            lines += [f"# HELP llamacpp:{name} {name.replace('_', ' ')} (emulated)",
                      f"# TYPE llamacpp:{name} {kind}", f"llamacpp:{name} {value:g}"]
    return "\n".join(lines) + "\n"
