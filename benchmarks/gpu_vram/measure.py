"""Start llama-server per case, read its VRAM (specd.gpu.nvml and nvidia-smi), compare with specd.gpu.vram.

    measure.py run --server BIN --models DIR --results FILE.jsonl [--deadline EPOCH] [--only a,b]
    measure.py report FILE.jsonl --models DIR     # Markdown table, estimates recomputed now

`run` skips cases already in the results file, so a second call continues a first one cut short.
`report` recomputes the estimates with the current specd.gpu.vram, so a model header is all it needs
(make_models.py --header-only writes one).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

from cases import CASES, Case

from specd.errors import PreflightError
from specd.gpu.check import margin_for, server_settings, split_mode_probe
from specd.gpu.compute import CUDA_CONTEXT
from specd.gpu.gguf import read_gguf_info
from specd.gpu.nvml import GIB, NoGpu, probe_gpus, process_vram
from specd.gpu.settings import ServerSettings, settings_from_argv
from specd.gpu.split_probe import SplitProbe
from specd.gpu.vram import VramEstimate, combined, estimate_per_gpu, estimate_vram

MIB = 1024**2
PORT = 18471



_BUFFER = re.compile(r"(\S+)\s+(model|KV|compute|RS|output) buffer size =\s*([\d.]+) MiB")
_BREAKDOWN = re.compile(r"common_memory_breakdown_print|projected to use")
_NEW_CONTEXT = re.compile(r"llama_context: constructing llama_context")
_NODES = re.compile(r"sched_reserve: graph(?: \([^)]*\))?: nodes = (\d+)")


def argv_for(case: Case, server: Path, models: Path) -> list[str]:
    argv = [str(server), "-m", str(models / f"{case.model}.gguf"), "-c", str(case.ctx), "-ctk", case.ctk,
            "-ctv", case.ctv, "-ngl", str(case.ngl), "--host", "127.0.0.1", "--port", str(PORT),
            "-lv", "4", "--no-webui"]
    if case.parallel is not None:
        argv += ["-np", str(case.parallel)]
    if case.flash_attn != "auto":
        argv += ["-fa", case.flash_attn]
    if case.ubatch != 512:
        argv += ["-ub", str(case.ubatch), "-b", str(max(2048, case.ubatch))]
    if case.draft is not None:
        argv += ["-md", str(models / f"{case.draft}.gguf"), "-ngld", "99"]
        if "--spec-type" not in case.args:
            argv += ["--spec-type", "draft-simple"]
    return argv + list(case.args)


def parse_buffers(log: str) -> dict[str, float]:
    """MiB per category summed over CUDA devices, from llama.cpp's '<buf> X buffer size = N MiB' lines.

    A context may reserve its compute buffer again later (the MTP or a DFlash draft context once the
    server sets its outputs; the target once a DFlash draft asks for its layer inputs): the buffer is
    then replaced, not added. A later reserve belongs to the context whose last graph had as many
    nodes, else to the context built last."""
    totals: dict[str, float] = {}
    compute: list[dict[str, float]] = []          # per context: device -> MiB of its last reserve
    nodes: list[int] = []
    pending: tuple[str, float] | None = None
    for line in log.splitlines():
        if _NEW_CONTEXT.search(line):
            compute.append({})
            nodes.append(-1)
        found = _BUFFER.search(line)
        if found and found.group(1).startswith("CUDA") and not found.group(1).startswith("CUDA_Host"):
            buffer, kind, mib = found.group(1), found.group(2), float(found.group(3))
            if kind == "compute":
                pending = (buffer, mib)
            else:
                totals[kind] = totals.get(kind, 0.0) + mib
        graph = _NODES.search(line)
        if graph and pending is not None and compute:
            count = int(graph.group(1))
            owner = nodes.index(count) if count in nodes else len(compute) - 1
            compute[owner][pending[0]] = pending[1]
            nodes[owner] = count
            pending = None
    if compute:
        totals["compute"] = sum(sum(context.values()) for context in compute)
    return totals


def parse_smi(csv: str, pids: set[int]) -> int | None:
    """Bytes nvidia-smi's `--query-compute-apps=pid,used_memory --format=csv,noheader,nounits` gives pids."""
    total, found = 0, False
    for line in csv.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 2 or not fields[0].isdigit() or int(fields[0]) not in pids:
            continue
        if fields[1].isdigit():
            total += int(fields[1]) * MIB
            found = True
    return total if found else None


def _smi(pids: set[int]) -> int | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                              "--format=csv,noheader,nounits"], check=False, capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_smi(out.stdout, pids)


def _http(path: str, body: dict[str, Any] | None = None, timeout: float = 5.0) -> dict[str, Any] | None:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}", data=data,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            result: dict[str, Any] = json.loads(response.read())
            return result
    except (urllib.error.URLError, OSError, ValueError):
        return None


_LAST_BY_DEVICE: dict[str, list[tuple[int, int]]] = {}


def _read_vram(pid: int, when: str = "") -> tuple[int | None, int | None]:
    reading = process_vram(pid)
    nvml = None if isinstance(reading, NoGpu) else reading.used_bytes
    tree = set(reading.pids) if not isinstance(reading, NoGpu) else {pid}
    _LAST_BY_DEVICE[when] = [] if isinstance(reading, NoGpu) else [list(pair) for pair in reading.by_device]
    return nvml, _smi(tree)


def measure(case: Case, server: Path, models: Path, logs: Path, limit_s: float = 240) -> dict[str, Any]:
    log_path = logs / (re.sub(r"[^A-Za-z0-9_.-]+", "_", case.name) + ".log")
    started = time.monotonic()
    with log_path.open("w") as log:
        process = subprocess.Popen(argv_for(case, server, models), stdout=log, stderr=subprocess.STDOUT,
                                   env={**os.environ, **dict(case.env)})
    result: dict[str, Any] = {"case": asdict(case), "ok": False}
    try:
        while time.monotonic() - started < limit_s:
            if process.poll() is not None:
                result["error"] = f"exited with {process.returncode}"
                break
            health = _http("/health", timeout=2)
            if health is not None and health.get("status") == "ok":
                break
            time.sleep(0.5)
        else:
            result["error"] = f"not healthy in {limit_s:.0f} s"
        if "error" not in result:
            result["load_s"] = round(time.monotonic() - started, 1)
            time.sleep(1.0)
            result["idle_nvml"], result["idle_smi"] = _read_vram(process.pid, "idle")
            result["idle_by_device"] = _LAST_BY_DEVICE["idle"]
            prompt = " ".join(["hello world"] * (case.prompt_tokens // 2))
            reply = _http("/completion", {"prompt": prompt, "n_predict": 16, "cache_prompt": False}, timeout=180)
            result["prompt_n"] = (reply or {}).get("timings", {}).get("prompt_n")
            result["loaded_nvml"], result["loaded_smi"] = _read_vram(process.pid, "loaded")
            result["loaded_by_device"] = _LAST_BY_DEVICE["loaded"]
            result["ok"] = result["idle_nvml"] is not None or result["idle_smi"] is not None
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    text = log_path.read_text(errors="replace")
    result["buffers_mib"] = parse_buffers(text)
    result["breakdown"] = [line.split(" I ", 1)[-1] for line in text.splitlines() if _BREAKDOWN.search(line)][-8:]
    if not result["ok"]:
        result["log_tail"] = text.splitlines()[-15:]
    return result


def estimate_for(case: Case, models: Path) -> VramEstimate | None:
    """The estimate preflight would make on one GPU: settings read from the exact argv the case runs."""
    try:
        model = read_gguf_info(models / f"{case.model}.gguf")
        draft = read_gguf_info(models / f"{case.draft}.gguf") if case.draft else None
    except PreflightError as exc:
        print(f"{case.name}: no estimate: {exc}", flush=True)
        return None
    settings = settings_from_argv(argv_for(case, Path("llama-server"), models), dict(case.env))
    return estimate_vram(model, draft, 0, None, settings=settings)


def settings_for(case: Case, models: Path, server: Path) -> ServerSettings:
    """The settings preflight reads from the case's argv and environment, with the binary's own say."""
    return server_settings(argv_for(case, server, models), dict(case.env))


def split_probe_for(case: Case, server: Path, models: Path) -> SplitProbe | None:
    """specd's split-mode probe of the real binary, for row and tensor cases (None for the others)."""
    model = read_gguf_info(models / f"{case.model}.gguf")
    return split_mode_probe(argv_for(case, server, models), dict(case.env), model)


def estimate_per_gpu_for(case: Case, models: Path, free: tuple[int, ...], server: Path = Path("llama-server")
                         ) -> dict[int, VramEstimate]:
    """The per-GPU estimate preflight makes on a box with len(free) GPUs (split modes, -devd)."""
    model = read_gguf_info(models / f"{case.model}.gguf")
    draft = read_gguf_info(models / f"{case.draft}.gguf") if case.draft else None
    settings = server_settings(argv_for(case, server, models), dict(case.env))
    return estimate_per_gpu(model, draft, settings, len(free), free)


def baseline_for(case: Case, models: Path) -> int:
    """A trivial estimate to beat: the GGUF tensor bytes (model + draft) plus the CUDA context."""
    total = CUDA_CONTEXT
    for name in (case.model, case.draft):
        if name:
            total += read_gguf_info(models / f"{name}.gguf").tensor_bytes
    return total


def parts_of(estimate: VramEstimate) -> dict[str, int]:
    return {"weights": estimate.weights_bytes, "kv": estimate.kv_bytes, "recurrent": estimate.recurrent_bytes,
            "compute": estimate.compute_bytes, "runtime": estimate.runtime_bytes,
            "draft_weights": estimate.draft_weights_bytes, "draft_kv": estimate.draft_kv_bytes}


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def run(args: argparse.Namespace) -> int:
    results: Path = args.results
    groups = set(args.groups.split(","))
    chosen = [case for case in CASES if case.group in groups and (not args.only or case.name in args.only.split(","))]
    records = _records(results)
    if not records:   # the split goes into the file before anything is measured
        split = {group: [case.name for case in chosen if case.group == group] for group in sorted(groups)}
        header = {"split": split, "decided_before_measuring": True, "estimator": os.environ.get("ESTIMATOR", "?"),
                  "written": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
        results.write_text(json.dumps(header) + "\n")
    done = {record["case"]["name"] for record in records if "case" in record}
    logs = results.parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    state = probe_gpus()
    print(state.describe(), flush=True)
    for case in chosen:
        if case.name in done:
            continue
        if args.deadline and time.time() > args.deadline:
            print(f"deadline reached before {case.name}", flush=True)
            break
        if not (args.models / f"{case.model}.gguf").exists() or (
                case.draft and not (args.models / f"{case.draft}.gguf").exists()):
            print(f"{case.name}: model not there yet", flush=True)
            continue
        limit = min(240.0, args.deadline + 60 - time.time()) if args.deadline else 240.0
        probe = split_probe_for(case, args.server, args.models)      # before the server: what preflight asks
        result = measure(case, args.server, args.models, logs, limit)
        if probe is not None:
            result["split_probe"] = {"verdict": probe.verdict, "said": probe.said}
        estimate = estimate_for(case, args.models)
        result["estimate"] = estimate.total_bytes if estimate else None
        if not isinstance(state, NoGpu) and len(state.devices) > 1:
            free = tuple(device.free_bytes for device in state.devices)
            per_gpu = estimate_per_gpu_for(case, args.models, free, args.server)
            result["estimate_per_gpu"] = {str(index): part.total_bytes for index, part in per_gpu.items()}
            result["estimate"] = combined(per_gpu).total_bytes     # one definition: the sum of the GPUs'
            margin = margin_for(settings_for(case, args.models, args.server), read_gguf_info(
                args.models / f"{case.model}.gguf"), len(free))
            result["split_margin"] = margin.fraction if margin else 0.0
        result["estimate_parts"] = parts_of(estimate) if estimate else None
        result["estimator"] = os.environ.get("ESTIMATOR", "?")
        result["argv"] = argv_for(case, Path("llama-server"), Path("MODELS"))[1:]
        result["gpu"] = state.describe()
        with results.open("a") as handle:
            handle.write(json.dumps(result) + "\n")
        print(_row(result), flush=True)
    return 0


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / GIB:.2f}"


def _row(result: dict[str, Any], estimate: VramEstimate | None = None) -> str:
    """One table row; with `estimate`, also each component against llama.cpp's own buffer sizes."""
    case = result["case"]
    measured = max(v for v in (result.get("loaded_nvml"), result.get("idle_nvml"), 0) if v is not None)
    total = estimate.total_bytes if estimate else result.get("estimate")
    error = (total - measured) / measured * 100 if measured and total else None
    error_text = "-" if error is None else f"{error:+.1f}%"
    row = (f"| {case['name']} | {_gib(total)} | {_gib(result.get('idle_nvml'))} | "
           f"{_gib(result.get('loaded_nvml'))} | {_gib(result.get('loaded_smi'))} | {error_text} |")
    if estimate is None:
        return row
    logged = result.get("buffers_mib", {})
    runtime = measured / MIB - sum(logged.values()) if measured else None
    pairs = ((estimate.weights_bytes + estimate.draft_weights_bytes, logged.get("model")),
             (estimate.kv_bytes + estimate.draft_kv_bytes + estimate.recurrent_bytes,
              (logged.get("KV") or 0) + (logged.get("RS") or 0) or None),
             (estimate.compute_bytes, logged.get("compute")), (estimate.runtime_bytes, runtime))
    return row + "".join(f" {est / MIB:.0f} / {'-' if got is None else f'{got:.0f}'} |" for est, got in pairs)


def report(args: argparse.Namespace) -> int:
    records = [record for record in _records(args.results) if "case" in record]
    print("| case | estimate GiB | pynvml idle | pynvml after request | nvidia-smi after request | error | "
          "weights MiB est / llama.cpp | KV | compute | CUDA runtime (rest of the process) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for result in records:
        case = Case.from_record(result)
        print(_row(result, estimate_for(case, args.models)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run")
    run_parser.add_argument("--server", type=Path, required=True)
    run_parser.add_argument("--models", type=Path, required=True)
    run_parser.add_argument("--results", type=Path, required=True)
    run_parser.add_argument("--deadline", type=float, default=float(os.environ.get("DEADLINE", "0")))
    run_parser.add_argument("--only", default="")
    run_parser.add_argument("--groups", default="fit3,held3",
                            help="case groups to run (fit, check, fit3, held3, held4, held5, held6)")
    report_parser = sub.add_parser("report")
    report_parser.add_argument("results", type=Path)
    report_parser.add_argument("--models", type=Path, required=True)
    args = parser.parse_args(argv)
    return run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    sys.exit(main())
