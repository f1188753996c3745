"""The tuner's and the bench's tables read at 80 columns (issue 37's third first-hour run): rich cut
every cell of the nine-column decision table to a few letters there ("ngram-…", "not-f…", "0.61-…");
a user must be able to read which profile won, by how much and what the tuner made of it.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from specd.cli import tune_tables
from specd.tune.decision import Decision, Estimate
from specd.tune.results import Report, Result


def recorded(monkeypatch: pytest.MonkeyPatch, width: int) -> io.StringIO:
    out = io.StringIO()
    monkeypatch.setattr(tune_tables, "console", Console(file=out, width=width, markup=False, color_system=None))
    return out


def decision() -> Decision:
    return Decision(best="ngram-simple", active="ngram-simple", switch=False, margin=0.05, level=0.99,
                    reason="kept ngram-simple: no candidate is 5% faster", outcome="kept",
                    estimates=(Estimate("ngram-simple", 16, 660.0, 610.0, 720.0, False, model_wall_ms=660.0),
                               Estimate("autoregressive", 16, 740.0, 700.0, 790.0, False, model_wall_ms=720.0,
                                        ratio=1.08, ratio_lo=0.96, ratio_hi=1.23, pairs=16, verdict="not-faster")),
                    traffic={"name": "code", "source": "builtin", "size": 16, "class_mix": {"code": 16},
                             "concurrency": 1, "cache_reuse": False, "follow_ups": 0,
                             "sampling": {"temperature=0": 16}},
                    samples={"ngram-simple": 16, "autoregressive": 16}, stopped="every candidate was decided")


def test_the_decision_at_80_columns_keeps_names_ratios_and_verdicts_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    out = recorded(monkeypatch, 80)
    tune_tables.print_decision(decision(), "ngram-simple", {"ngram-simple": "llama-server",
                                                            "autoregressive": "llama-server"})
    text = out.getvalue()
    assert "…" not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    row = next(line for line in text.splitlines() if line.startswith("autoregressive"))
    assert "1.08 [0.96-1.23]" in row and "not-faster" in row
    assert "ngram-simple (best)" in text and "time vs ngram-simple [99.0%]" in text
    assert "engine llama-server" in text and "wall median 0.74 s (95% CI 0.70-0.79 s)" in text


def test_the_decision_on_a_wide_terminal_is_one_table(monkeypatch: pytest.MonkeyPatch) -> None:
    out = recorded(monkeypatch, 160)
    tune_tables.print_decision(decision(), "ngram-simple", {"ngram-simple": "llama-server",
                                                            "autoregressive": "llama-server"})
    header = next(line for line in out.getvalue().splitlines() if "profile" in line)
    assert "engine" in header and "model (mix)" in header and "verdict" in header


def test_the_bench_table_at_80_columns_keeps_every_figure_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    report = Report("code", ["ngram-simple", "autoregressive"],
                    {p: [Result(p, i, "code", 20, 32, 40.0, wall - 40.0, wall, draft_n=24, draft_accepted=18)
                         for i, wall in enumerate(walls)]
                     for p, walls in {"ngram-simple": [640.0, 660.0, 700.0], "autoregressive": [720.0, 740.0, 790.0]
                                      }.items()})
    out = recorded(monkeypatch, 80)
    tune_tables.print_bench_table(report)
    text = out.getvalue()
    assert "…" not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    rows = [line for line in text.splitlines() if line.startswith(("ngram-simple", "autoregressive"))]
    assert len(rows) == 2 and all("0.66 s [" in r or "0.74 s [" in r for r in rows)
    assert "accept" in text and "75%" in text and "engine" in text and "prefill" in text
