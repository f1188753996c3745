"""The page's figures: recorded traffic, the tuner's last bench, and the GPUs.

Traffic comes from the proxy's records (`specd.traffic`), the bench from the state DB
(`specd.tune.reports`), VRAM from NVML and the estimator preflight uses. Read-only.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import psutil

from specd import context
from specd.deploy.history import History, split_numbers
from specd.deploy.preflight import vram_estimate
from specd.errors import SpecdError
from specd.gpu import nvml
from specd.gpu.gguf import read_gguf_info
from specd.profiles.config import Deployment
from specd.profiles.load import list_profiles, load_profile
from specd.traffic import records as traffic
from specd.tune.reports import last_run
from specd.tune.stats import cis_separated
from specd.tune.tuner import model_insights

HOUR_S = 3600.0


def traffic_view(unit: str, hours: float = 24.0, now: float | None = None) -> dict[str, Any]:
    """`specd traffic`'s summary plus requests per hour and TTFT and acceptance per profile."""
    now = time.time() if now is None else now
    since = now - hours * HOUR_S
    conn = traffic.open_db(context.state_dir().db)
    try:
        summary = traffic.summarize(conn, since, unit=unit, until=now)
        records = traffic.fetch_records(conn, since, unit)
    finally:
        conn.close()
    per_hour = [0] * int(hours)
    for record in records:
        slot = int((record.ts - since) // HOUR_S)
        if 0 <= slot < len(per_hour):
            per_hour[slot] += 1
    ttfts: dict[str, list[float]] = defaultdict(list)
    for record in records:
        if record.ttft_ms is not None and 200 <= record.status < 300:
            ttfts[record.profile or "unknown"].append(record.ttft_ms)
    profiles = sorted(set(ttfts) | set(summary["acceptance"]))
    per_profile = []
    for name in profiles:
        acceptance = summary["acceptance"].get(name, {})
        per_profile.append({
            "profile": name, "requests": acceptance.get("requests", 0),
            "ttft_p50_ms": traffic.percentile(ttfts.get(name, []), 0.5),
            "ttft_p95_ms": traffic.percentile(ttfts.get(name, []), 0.95),
            "acceptance": acceptance.get("rate"), "decode_tok_s": acceptance.get("decode_tok_s"),
        })
    return {"hours": hours, "since": since, "requests_per_hour": per_hour, "per_profile": per_profile,
            **{k: summary[k] for k in ("requests", "failed", "streamed", "class_mix", "prompt_tokens_hist",
                                       "output_tokens_hist", "ttft_ms", "sampled_counters")}}


def _last_decision(unit: str) -> dict[str, Any] | None:
    history = History(context.state_dir().db)
    try:
        for event in history.events(unit, 200):
            if str(event["kind"]) in ("tune", "tune-dry-run"):
                sentence, numbers = split_numbers(str(event["detail"]))
                return {"at": event["at"], "kind": event["kind"], "reason": sentence, "numbers": numbers}
    finally:
        history.close()
    return None


def bench_view(unit: str) -> dict[str, Any]:
    """The last bench: wall clock per profile with 95% intervals, each request's point for the
    crossover chart, and where the fitted models say the winner changes."""
    decision = _last_decision(unit)
    run = last_run(unit)
    if run is None:
        return {"run": None, "decision": decision}
    report = run.report
    common = report.common_n()
    cells = []
    summaries = {name: report.summary(name, common or None) for name in report.benched()}
    best = min(summaries, key=lambda name: summaries[name].median) if summaries else None
    for name, summary in summaries.items():
        cells.append({
            "profile": name, "n": summary.n, "median_ms": summary.median, "ci_lo_ms": summary.ci_lo,
            "ci_hi_ms": summary.ci_hi, "high_variance": summary.high_variance, "best": name == best,
            "separated_from_best": None if best is None or name == best else cis_separated(summaries[best], summary),
            "points": [[r.output_tokens, round(r.wall_ms, 1)] for r in report.results[name]],
        })
    _, crossovers = model_insights(report, best) if summaries else ({}, ())
    return {"run": {"id": run.run_id, "at": run.at, "workload": report.workload, "elapsed_s": report.elapsed_s,
                    "concurrency": report.concurrency, "notes": report.notes, "compared_n": common},
            "cells": cells, "crossovers": list(crossovers), "decision": decision}


def _process_name(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline()[:2]) or psutil.Process(pid).name()
    except psutil.Error:
        return f"pid {pid}"


def gpu_view(deployments: list[Deployment], main_pids: dict[str, int]) -> dict[str, Any]:
    """Each GPU's memory, the VRAM each process holds, and each profile's estimate against free."""
    state = nvml.probe_gpus()
    devices: list[dict[str, Any]] = []
    processes: list[dict[str, Any]] = []
    if isinstance(state, nvml.GpuState):
        devices = [{"index": d.index, "name": d.name, "total_bytes": d.total_bytes, "free_bytes": d.free_bytes,
                    "used_bytes": d.used_bytes} for d in state.devices]
        listed = nvml.gpu_processes()
        owners = {pid: unit for unit, main in main_pids.items() if main for pid in nvml.process_tree(main)}
        if not isinstance(listed, nvml.NoGpu):
            for index, entries in sorted(listed.items()):
                for pid, used in entries:
                    processes.append({"device": index, "pid": pid, "used_bytes": used, "name": _process_name(pid),
                                      "unit": owners.get(pid)})
    free = state.free_bytes if isinstance(state, nvml.GpuState) else None
    estimates = []
    for deployment in deployments:
        held = sum(p["used_bytes"] or 0 for p in processes if p["unit"] == deployment.unit)
        for listing in list_profiles(deployment.profiles_dir):
            if listing.abstract or listing.error:
                continue
            estimates.append(_estimate(deployment, listing.name, free, held))
    return {"gpu": None if isinstance(state, nvml.NoGpu) else state.describe(),
            "no_gpu": state.reason if isinstance(state, nvml.NoGpu) else None,
            "devices": devices, "processes": processes, "estimates": estimates}


def _estimate(deployment: Deployment, name: str, free: int | None, held_by_unit: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"unit": deployment.unit, "profile": name, "needed_bytes": None, "fits": None}
    try:
        profile = load_profile(deployment.profiles_dir, name)
        if profile.engine == "vllm":
            entry["note"] = "vLLM sizes its own memory (gpu_memory_utilization); no GGUF to estimate from"
            return entry
        if profile.model is None or profile.launcher:
            entry["note"] = "no local model file to read"
            return entry
        model = read_gguf_info(profile.model)
        draft = read_gguf_info(profile.speculative.draft_model) if profile.speculative.draft_model else None
        estimate = vram_estimate(profile, model, draft)
    except SpecdError as exc:
        entry["note"] = exc.message
        return entry
    entry["needed_bytes"] = estimate.total_bytes
    entry["describe"] = estimate.describe()
    if free is not None:
        available = free + held_by_unit
        entry["available_bytes"] = available
        entry["fits"] = estimate.total_bytes <= available
    return entry
