"""The tuner end to end on the real tiny llama-server: bench interleaved, decide, end where it says.

Which profile is faster on this 2-core box is a measurement, not a pass/fail fact (the tiny base
model's prose loops on itself, which n-gram drafts love): that lives in benchmarks/, not here.
The bench interleaves the two profiles round by round, so a load drift on a busy box hits both alike.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.conftest import Box

FUNCTIONS = [
    "def add(a, b):\n    return a + b\n",
    "def scale(values, factor):\n    return [v * factor for v in values]\n",
    "def clamp(x, lo, hi):\n    return max(lo, min(hi, x))\n",
    "def mean(values):\n    return sum(values) / len(values)\n",
    "def first_word(text):\n    return text.split()[0] if text else ''\n",
    "def is_even(n):\n    return n % 2 == 0\n",
]


def repeat_workload(path: Path) -> Path:
    """Editing traffic: 'return this code unchanged' asks, whose answers repeat the prompt. Greedy:
    sampled at the server's default temperature the tiny base model sometimes answers with other
    text, n-gram speculation then drafts nothing, and the tuner rightly leaves it out (seen on a
    loaded box: no draft in 6 requests)."""
    lines = []
    for shift in range(4):
        code = "\n".join(FUNCTIONS[shift:] + FUNCTIONS[:shift])
        ask = f"Repeat the following Python code exactly, with no other text:\n```python\n{code}```"
        lines.append(json.dumps({"messages": [{"role": "user", "content": ask}], "max_tokens": 128,
                                 "temperature": 0, "specd": {"task_class": "code"}}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _tune(box: Box, workload: str, n: int, max_tokens: int) -> dict[str, object]:
    result = box.specd("tune", "--workload", workload, "--n", str(n), "--max-n", str(n),  # n each: bounded time
                       "--max-tokens", str(max_tokens), "--json",
                       "--profile", "autoregressive", "--profile", "ngram-simple", timeout=600, check=True)
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_the_tuner_benches_interleaved_and_ends_on_what_it_decided(box: Box, real_server: None,
                                                                    tmp_path: Path) -> None:
    box.specd("switch", "autoregressive", check=True)

    prose = _tune(box, "prose", 4, 48)
    assert prose["final_profile"] == ("ngram-simple" if prose["switch"] else "autoregressive"), prose["reason"]
    box.specd("switch", "autoregressive", check=True)

    rewrite = _tune(box, str(repeat_workload(tmp_path / "rewrite.jsonl")), 6, 128)
    estimates = rewrite["estimates"]
    assert isinstance(estimates, dict) and set(estimates) == {"autoregressive", "ngram-simple"}, rewrite["notes"]
    # "best" is the faster by the paired comparison (n-gram's wall clock over plain's, request by request),
    # not by the medians: on a busy box the two can disagree
    ratio = estimates["ngram-simple"]["ratio"]
    assert (ratio < 1.0) == (rewrite["best"] == "ngram-simple"), (ratio, rewrite["best"], rewrite["reason"])
    # It switches only to a profile whose paired interval (its wall clock over the active one's, request by
    # request) lies wholly below 1 - margin; else it says why not.
    if rewrite["switch"]:
        assert rewrite["best"] != "autoregressive", rewrite["reason"]
        winner = estimates[rewrite["best"]]
        assert winner["verdict"] == "faster" and winner["ratio_hi"] < 1.0 - rewrite["margin"], winner
        assert "faster than autoregressive" in str(rewrite["reason"]), rewrite["reason"]
    else:
        assert str(rewrite["reason"]), "a kept profile comes with the reason"
    expected = rewrite["best"] if rewrite["switch"] else "autoregressive"
    status = json.loads(box.specd("status", "--json", check=True).stdout)
    assert rewrite["final_profile"] == status["active_profile"] == expected
    kinds = [e["kind"] for e in box.history().events(box.unit) if e["kind"] == "tune"]
    assert len(kinds) == 2
    # Drift-robust: the profiles ran interleaved (A B | B A | ...), not one block after the other.
    db = sqlite3.connect(Path(box.env["XDG_STATE_HOME"]) / "specd" / "specd.db")
    summary = json.loads(db.execute("SELECT summary FROM bench_runs WHERE id=?", (rewrite["bench_run"],)).fetchone()[0])
    assert summary["rounds"] >= 2 and summary["switches"] >= 3, summary
    if rewrite["switch"]:  # the fidelity gate verified ngram-simple before switching to it
        verified = db.execute("SELECT structured_ok FROM verifications WHERE profile='ngram-simple'").fetchall()
        assert verified == [(1,)]
