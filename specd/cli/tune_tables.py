"""How bench and tune results read: their tables and summary lines (the commands are in tune_cmds.py).

rich's table is imported when a table is drawn: registering the commands must stay cheap
(benchmarks/cli_startup.py). Below WIDE_TABLE columns rich cut every cell of these nine- and
eleven-column tables to a few letters ("ngram-…", "not-f…" at 80 columns); there the tables are drawn
as plain lines instead: the columns a choice is read from, whole, and the rest as each row's detail
(specd.cli.layout).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specd.cli import console, styled
from specd.cli.layout import table_with_detail

WIDE_TABLE = 120  # narrower terminals get the plain-line layout

if TYPE_CHECKING:
    from rich.table import Table

    from specd.tune.bench import Report
    from specd.tune.decision import Decision, Estimate


def fmt_ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1000.0:.2f} s"


def print_bench_table(report: Report) -> None:
    """The bench's table: rich's at WIDE_TABLE columns and more, else plain lines that keep each word whole."""
    if console.width >= WIDE_TABLE:
        console.print(bench_table(report))
        return
    rows: list[list[str]] = []
    details: list[str] = []
    for name, cell in report.as_json()["cells"].items():
        wall = cell["wall_ms"]
        lo, hi = wall["ci95"]
        decode = "n/a" if cell["decode_tok_s_median"] is None else f"{cell['decode_tok_s_median']:.1f}"
        rows.append([name, str(cell["n"]), f"{fmt_ms(wall['median'])} [{lo / 1000:.2f}-{hi / 1000:.2f}]", decode,
                     _acceptance(cell)])
        details.append("; ".join([
            f"engine {cell['engine']}",
            f"prefill {fmt_ms(cell['prefill_ms_median'])} ({fmt_ms(cell['prefill_ms_no_reuse_median'])} no reuse)",
            f"cache_n {cell['cache_n_median']:.0f}", f"reasoning tok {_reasoning(cell)}",
            f"VRAM peak {_vram(cell)}", *_flags(cell)]))
    for line in table_with_detail(["profile", "n", "wall median [95% CI]", "decode tok/s", "accept"], rows, details,
                                  console.width):
        console.print(line, highlight=False, soft_wrap=True)


def bench_table(report: Report) -> Table:
    from rich.table import Table

    data = report.as_json()["cells"]
    table = Table("profile", "engine", "n", "wall median [95% CI]", "prefill (no reuse)", "cache_n", "decode tok/s",
                  "accept", "reasoning tok", "VRAM peak", "")
    for name, cell in data.items():
        wall = cell["wall_ms"]
        lo, hi = wall["ci95"]
        table.add_row(name, cell["engine"], str(cell["n"]),
                      f"{fmt_ms(wall['median'])} [{lo / 1000:.2f}-{hi / 1000:.2f}]",
                      f"{fmt_ms(cell['prefill_ms_median'])} ({fmt_ms(cell['prefill_ms_no_reuse_median'])})",
                      f"{cell['cache_n_median']:.0f}",
                      "n/a" if cell["decode_tok_s_median"] is None else f"{cell['decode_tok_s_median']:.1f}",
                      _acceptance(cell), _reasoning(cell), _vram(cell), ", ".join(_flags(cell)))
    return table


def _reasoning(cell: dict[str, Any]) -> str:
    return "n/a" if cell["reasoning_tokens_median"] is None else f"{cell['reasoning_tokens_median']:.0f}"


def _vram(cell: dict[str, Any]) -> str:
    vram = cell["vram_peak_bytes"]
    return vram if isinstance(vram, str) else f"{vram / 2**30:.2f} GiB"


def _flags(cell: dict[str, Any]) -> list[str]:
    return (["early stop"] if cell["stopped_early"] else []) + (["high variance"] if cell["high_variance"] else [])


def traffic_line(traffic: dict[str, Any]) -> str:
    """What a bench replayed, in one line: source, size, mix, concurrency, cache reuse, sampling."""
    mix = ", ".join(f"{name} {count}" for name, count in traffic["class_mix"].items())
    sampling = "; ".join(f"{label} x{count}" for label, count in traffic["sampling"].items())
    return (f"workload {traffic['name']} ({traffic['source']}, {traffic['size']} requests: {mix}), "
            f"concurrency {traffic['concurrency']}, cache reuse {'on' if traffic['cache_reuse'] else 'off'} "
            f"({traffic['follow_ups']} follow-up turns), sampling {sampling}")


def _acceptance(cell: dict[str, Any]) -> str:
    """Per-request acceptance (llama-server's timings), else the server's counters over the bench (vLLM)."""
    if cell["acceptance_median"] is not None:
        return f"{cell['acceptance_median']:.0%}"
    counters = cell.get("spec_counters")
    if counters and counters["drafted"]:
        return f"{counters['accepted'] / counters['drafted']:.0%} (/metrics)"
    return "n/a"


def _ratio_cell(lo: float | None, ratio: float | None, hi: float | None) -> str:
    if ratio is None:
        return "1 (active)"
    top = "inf" if hi is None or hi == float("inf") else f"{hi:.2f}"
    return f"{ratio:.2f} [{(lo or 0.0):.2f}-{top}]"


def _mark(decision: Decision, profile: str) -> str:
    return "best" if profile == decision.best else ("active" if profile == decision.active else "")


def _verdict(est: Estimate) -> str:
    return (est.verdict or "") + (" (per token)" if est.measure == "per-token" else "")


def _decision_table(decision: Decision, engines: dict[str, str]) -> Table:
    from rich.table import Table

    level = f"{decision.level:.1%}" if decision.level else "95%"
    table = Table("profile", "engine", "n", "wall median", "95% CI",
                  f"time vs {decision.active or 'reference'} [{level}]", "verdict", "model (mix)", "")
    for est in decision.estimates:
        mark = _mark(decision, est.profile)
        table.add_row(est.profile, engines.get(est.profile, "?"), str(est.n), fmt_ms(est.median_ms),
                      f"{est.ci_lo_ms / 1000:.2f}-{est.ci_hi_ms / 1000:.2f} s",
                      _ratio_cell(est.ratio_lo, est.ratio, est.ratio_hi), _verdict(est), fmt_ms(est.model_wall_ms),
                      mark + (" (noisy)" if est.high_variance else ""))
    return table


def _decision_lines(decision: Decision, engines: dict[str, str], width: int) -> list[str]:
    """The decision table as plain lines for a narrow terminal: profile, n, the paired ratio and the
    verdict in whole words; the rest (engine, the median and its CI, the model's figure) below."""
    level = f"{decision.level:.1%}" if decision.level else "95%"
    rows: list[list[str]] = []
    details: list[str] = []
    for est in decision.estimates:
        mark = _mark(decision, est.profile)
        rows.append([est.profile + (f" ({mark})" if mark else ""), str(est.n),
                     _ratio_cell(est.ratio_lo, est.ratio, est.ratio_hi),
                     _verdict(est)])
        details.append("; ".join([
            f"engine {engines.get(est.profile, '?')}",
            f"wall median {fmt_ms(est.median_ms)} (95% CI {est.ci_lo_ms / 1000:.2f}-{est.ci_hi_ms / 1000:.2f} s)",
            f"model (mix) {fmt_ms(est.model_wall_ms)}", *(["noisy"] if est.high_variance else [])]))
    headers = ["profile", "n", f"time vs {decision.active or 'reference'} [{level}]", "verdict"]
    return table_with_detail(headers, rows, details, width)


def print_decision(decision: Decision, final_profile: str | None, engines: dict[str, str]) -> None:
    if console.width >= WIDE_TABLE:
        console.print(_decision_table(decision, engines))
    else:
        for line in _decision_lines(decision, engines, console.width):
            console.print(line, highlight=False, soft_wrap=True)
    for sentence in (*decision.crossovers, *decision.notes):
        console.print(styled("[dim]note:[/] {}", sentence), highlight=False)
    console.print(f"measured on {traffic_line(dict(decision.traffic))}", highlight=False)
    spent = ", ".join(f"{name} {count}" for name, count in decision.samples.items())
    console.print(f"requests per profile: {spent}; stopped: {decision.stopped or 'n/a'}", highlight=False)
    console.print(styled("[bold]{}[/] (outcome: {}; bench {} s; now on {})", decision.reason, decision.outcome,
                         f"{decision.bench_s:.0f}", final_profile or "nothing"), highlight=False)
