"""Is speculation seen working? Drafted tokens per profile, from the bench's own answers.

A speculator can be accepted by a binary and never run: `--spec-type ngram-*` on a hybrid
(recurrent) target in one fork answers every request with `timings.draft_n = null` at the speed of
`none`. A tuner that does not look would bench two identical configurations and might "win" with
one of them. And a binary with speculation on by default drafts under a profile that says
`type = "none"`. So every bench reads `timings.draft_n` of every answer and gives each profile a
verdict (`judge`, pure): a speculative profile with no drafted token across its requests is
"configured but inactive on this model/binary" and is left out of the tuner's decision; a plain
profile whose server drafted is "speculating although type = none". The verdicts are kept in the
state DB per unit, profile and profile fingerprint (an edited profile is judged afresh), where
`specd profiles` and `specd doctor` read them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

from specd import store
from specd.engines.metrics import SpecCounters
from specd.profiles.config import Deployment
from specd.tune.bench import Report, Result
from specd.tune.verify import fingerprint

Verdict = Literal["active", "inactive", "plain", "drafting-plain", "unknown"]
MIN_OUTPUT_TOKENS = 8  # a shorter answer may end before a speculator had anything to draft from

INACTIVE = "configured but inactive on this model/binary"
DRAFTING_PLAIN = "speculating although type = \"none\" (this binary turns speculation on by default?)"

SCHEMA = """
CREATE TABLE IF NOT EXISTS speculation_activity (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    unit TEXT NOT NULL,
    profile TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    at REAL NOT NULL,
    verdict TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS speculation_activity_profile ON speculation_activity(unit, profile, at);
"""


@dataclass(frozen=True)
class Activity:
    """What one profile's answers in one bench said about its speculator."""

    profile: str
    speculative: bool  # the profile configures a speculator (type != "none")
    verdict: Verdict
    requests: int  # answers long enough to have drafted, with `timings`
    draft_n: int
    draft_accepted: int

    @property
    def excluded(self) -> bool:
        """Left out of the tuner's decision: it is not what its profile says it is."""
        return self.verdict == "inactive"

    @property
    def sentence(self) -> str:
        counts = f"{self.draft_n} tokens drafted in {self.requests} requests"
        if self.verdict == "inactive":
            return (f"{self.profile}: {INACTIVE}: no request drafted a token (timings.draft_n, or the server's "
                    f"spec_decode counters) in {self.requests} "
                    "requests; an n-gram type also drafts nothing on traffic that never repeats itself")
        if self.verdict == "drafting-plain":
            return f"{self.profile}: {DRAFTING_PLAIN}: {counts}"
        if self.verdict == "unknown":
            return (f"{self.profile}: speculation not checked: no answer carried timings with "
                    f"{MIN_OUTPUT_TOKENS}+ tokens")
        accepted = f", {self.draft_accepted} accepted" if self.verdict == "active" else ""
        return f"{self.profile}: {counts}{accepted}"


def judge(profile: str, speculative: bool, results: Sequence[Result], counters: SpecCounters | None = None) -> Activity:
    """The pure rule. Only answers with `timings` and MIN_OUTPUT_TOKENS+ tokens count; none: unknown.
    Answers without `timings` (vLLM's) are judged by the server's own counters over the same requests
    (`counters`, from /metrics), when the bench could read them."""
    counted = [r for r in results if r.has_timings and r.output_tokens >= MIN_OUTPUT_TOKENS]
    drafted = sum(r.draft_n or 0 for r in counted)
    accepted = sum(r.draft_accepted or 0 for r in counted)
    if not counted and counters is not None:
        counted = [r for r in results if r.output_tokens >= MIN_OUTPUT_TOKENS]
        drafted, accepted = counters.drafted, counters.accepted
    verdict: Verdict
    if not counted:
        verdict = "unknown"
    elif speculative:
        verdict = "active" if drafted > 0 else "inactive"
    else:
        verdict = "drafting-plain" if drafted > 0 else "plain"
    return Activity(profile, speculative, verdict, len(counted), drafted, accepted)


def judge_report(report: Report, speculative: Callable[[str], bool]) -> dict[str, Activity]:
    return {name: judge(name, speculative(name), report.results[name], report.counters.get(name))
            for name in report.benched()}


def notes(activities: Iterable[Activity]) -> list[str]:
    """The sentences a bench or tune prints: only the verdicts that need saying."""
    return [a.sentence for a in activities if a.verdict in ("inactive", "drafting-plain")]


def excluded_note(activity: Activity, active: str | None) -> str:
    if activity.profile == active:
        return f"{activity.profile} is the active profile: kept as the baseline although its speculator never drafted"
    return f"{activity.profile}: left out of the decision ({INACTIVE})"


def save(unit: str, activities: Iterable[Activity], fingerprints: Mapping[str, str]) -> None:
    """One row per judged profile; unknown verdicts are not kept (they say nothing)."""
    rows = [(unit, a.profile, fingerprints.get(a.profile, ""), time.time(), a.verdict, json.dumps(asdict(a)))
            for a in activities if a.verdict != "unknown"]
    if not rows:
        return
    conn = store.connect()
    try:
        store.ensure_schema(conn, SCHEMA)
        conn.executemany("INSERT INTO speculation_activity (unit, profile, fingerprint, at, verdict, detail) "
                         "VALUES (?,?,?,?,?,?)", rows)
    finally:
        conn.close()


def last(unit: str, profile: str, fingerprint: str) -> Activity | None:
    """The latest verdict on this profile as it is now (None: never judged, or edited since)."""
    conn = store.connect()
    try:
        store.ensure_schema(conn, SCHEMA)
        row = conn.execute("SELECT detail FROM speculation_activity WHERE unit=? AND profile=? AND fingerprint=? "
                           "ORDER BY at DESC, id DESC LIMIT 1", (unit, profile, fingerprint)).fetchone()
    finally:
        conn.close()
    return None if row is None else Activity(**json.loads(row["detail"]))


def problem(unit: str, profile: str, fingerprint: str) -> str | None:
    """What `specd profiles` / `doctor` show for a profile whose last bench caught it not doing what it says."""
    found = last(unit, profile, fingerprint)
    if found is None or found.verdict not in ("inactive", "drafting-plain"):
        return None
    what = INACTIVE if found.verdict == "inactive" else DRAFTING_PLAIN
    return f"{what} (last bench: {found.draft_n} tokens drafted in {found.requests} requests)"


def profile_problems(deployment: Deployment, profile: str) -> list[str]:
    """`problem` for a deployment's profile as its file says now: [] or one sentence."""
    found = problem(deployment.unit, profile, fingerprint(deployment, profile))
    return [found] if found else []
