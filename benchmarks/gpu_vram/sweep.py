"""llama.cpp's CUDA compute buffer for many settings at once, from its memory-fit dry run.

    sweep.py --server BIN --vocab VOCAB.json.gz --work DIR --out FILE.jsonl [--jobs N] [--grid NAME]

llama-server's fit step (`common_params_fit`, on by default) first builds the context with
`no_alloc` and prints its memory breakdown (`CUDA0 ... (self = model + context + compute)`, MiB) —
the same graph reservation, the same ggml-alloc placement as the real load, without allocating.
Each setting's server is stopped as soon as that line appears, so a setting costs a CUDA context and a
header read (about a second). The
models are header-only GGUFs made sparse to their full size (no tensor data is read by the dry run).
Used to read how many host expert copies ggml's allocator reaches (specd.gpu.expert_copies); the
measured VRAM of whole processes stays measure.py's job.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_models import write_model

_BREAKDOWN = re.compile(r"\|\s+- (\S+).*?(\d+) = +(\d+) \+ +(\d+) \+ +(\d+)")   # self = model + context + compute
_REAL = re.compile(r"(\S+) compute buffer size =\s*([\d.]+) MiB")
_SPLITS = re.compile(r"graph splits = (\d+)")


def sparse_model(preset: str, vocab: Path, folder: Path) -> Path:
    """A header-only GGUF grown (sparsely) past the end of its tensor data."""
    out = folder / f"{preset}-q8_0.gguf"
    if out.exists():
        return out
    write_model(preset, "q8_0", vocab, out, header_only=True)
    os.truncate(out, out.stat().st_size + 40 * 1024**3)   # past every tensor's end (a hole: no disk used)
    return out


def grid(name: str) -> list[dict[str, Any]]:
    """(model, ctx, ubatch, parallel, ctk, offload) settings; offload: 'cpu' or the --n-cpu-moe count."""
    found: list[dict[str, Any]] = []

    def add(model: str, ctx: int, ub: int, np_: int | None, ctk: str, off: str | int) -> None:
        found.append({"model": model, "ctx": ctx, "ubatch": ub, "parallel": np_, "ctk": ctk, "offload": off})

    if name == "explore":
        for off, ub, np_ in itertools.product([*range(1, 13), "cpu"], [256, 512, 768, 1024, 1536, 2048],
                                              [None, 1, 3]):
            add("moe35", 32768, ub, np_, "f16", off)
        for ctx, ub, off in itertools.product([16384, 65536, 131072], [512, 1024], [6, 10, "cpu"]):
            add("moe35", ctx, ub, None, "f16", off)
        for off, ub, ctk in itertools.product([4, 8, "cpu"], [512, 1536], ["q8_0", "q4_0"]):
            add("moe35", 32768, ub, None, ctk, off)
        for off, ub, np_ in itertools.product([1, 2, 3, "cpu"], [256, 512, 1024, 2048], [None, 3]):
            add("next80", 32768, ub, np_, "f16", off)
        for off, ub, np_ in itertools.product([1, 3, 5, 7, "cpu"], [256, 512, 1024, 2048], [None, 3]):
            add("moe30", 32768, ub, np_, "f16", off)
    return found


def argv(server: Path, model: Path, setting: dict[str, Any], port: int) -> list[str]:
    args = [str(server), "-m", str(model), "-c", str(setting["ctx"]), "-ctk", setting["ctk"],
            "-ctv", setting["ctk"], "-ngl", "99", "--host", "127.0.0.1", "--port", str(port),
            "-lv", "4", "--no-webui", "-ub", str(setting["ubatch"]), "-b", str(max(2048, setting["ubatch"]))]
    if setting["parallel"] is not None:
        args += ["-np", str(setting["parallel"])]
    args += ["--cpu-moe"] if setting["offload"] == "cpu" else ["--n-cpu-moe", str(setting["offload"])]
    return args


def dry_run(server: Path, model: Path, setting: dict[str, Any], port: int, env: dict[str, str],
            log: Path | None) -> dict[str, Any]:
    started = time.monotonic()
    command = argv(server, model, setting, port)
    if log is not None:
        command[command.index("-lv") + 1] = "4"          # the scheduler's split listing is debug output
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", env=env)
    found: dict[str, Any] = {**setting}
    lines: list[str] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if log is not None:
                lines.append(line)
            splits = _SPLITS.search(line)
            if splits:
                found["splits"] = int(splits.group(1))
            real = _REAL.search(line)
            if real and real.group(1) == os.environ.get("SWEEP_DEVICE", "CUDA0"):
                found["real_compute_mib"] = float(real.group(2))
                break
            hit = _BREAKDOWN.search(line)
            if hit and hit.group(1) == os.environ.get("SWEEP_DEVICE", "CUDA0") and "compute_mib" not in found:
                found.update(model_mib=int(hit.group(3)), context_mib=int(hit.group(4)), compute_mib=int(hit.group(5)))
                if log is None:
                    break                # a log waits for the real load's reserve (the dry run's is not logged)
            if time.monotonic() - started > 90:
                break
    finally:
        proc.kill()
        proc.wait()
    if log is not None:
        log.write_text("".join(lines))
    found["seconds"] = round(time.monotonic() - started, 2)
    return found


def main(args_list: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", type=Path, required=True)
    parser.add_argument("--vocab", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=6)
    parser.add_argument("--grid", default="explore")
    parser.add_argument("--debug-log", type=Path, help="one GGML_SCHED_DEBUG=2 log per setting in --debug-settings")
    parser.add_argument("--debug-settings", default="", help="JSON list of settings to log the scheduler's splits of")
    args = parser.parse_args(args_list)
    args.work.mkdir(parents=True, exist_ok=True)
    settings = grid(args.grid)
    models = {name: sparse_model(name, args.vocab, args.work) for name in sorted({s["model"] for s in settings})}
    env = {**os.environ}
    with args.out.open("a") as out, concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(dry_run, args.server, models[s["model"]], s, 19000 + i, env, None)
                   for i, s in enumerate(settings)]
        for future in concurrent.futures.as_completed(futures):
            out.write(json.dumps(future.result()) + "\n")
            out.flush()
    if args.debug_log and args.debug_settings:
        args.debug_log.mkdir(parents=True, exist_ok=True)
        for i, setting in enumerate(json.loads(args.debug_settings)):
            for name in sorted({setting["model"]}):
                sparse_model(name, args.vocab, args.work)
            dry_run(args.server, args.work / f"{setting['model']}-q8_0.gguf", setting, 18900 + i,
                    {**env, "GGML_SCHED_DEBUG": "2"}, args.debug_log / f"sched-{i}.log")
    return 0


if __name__ == "__main__":
    sys.exit(main())
