"""specd verify: comparing answers (pure), the gate the tuner obeys, the switch warning, and the real tiny server."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from specd.context import seams_for
from specd.profiles.config import Deployment
from specd.tune.bench import restoring
from specd.tune.decision import Decision
from specd.tune.fidelity import Answer, ToolCall, answer_of, compare, edit_distance, json_shape
from specd.tune.paired import Comparison, Interval
from specd.tune.stats import summarize
from specd.tune.targets import DeploymentTarget, Reply
from specd.tune.tuner import guarded_decision
from specd.tune.verify import (
    BUILTIN_PROBES,
    Probe,
    save_verification,
    traffic_probes,
    tuner_guard,
    unverified_warning,
    verify_profiles,
)
from tests.conftest import REPO, Box

WEATHER = ToolCall("get_weather", '{"city": "Paris", "unit": "c"}')


def test_tool_calls_match_on_names_keys_and_shape_not_on_values() -> None:
    other_city = Answer("", (ToolCall("get_weather", '{"city": "Lyon", "unit": "f"}'),))
    assert compare("t", "tool", Answer("", (WEATHER,)), other_city).structured_ok is True
    renamed = Answer("", (ToolCall("get_forecast", '{"city": "Paris", "unit": "c"}'),))
    missing_key = Answer("", (ToolCall("get_weather", '{"city": "Paris"}'),))
    wrong_type = Answer("", (ToolCall("get_weather", '{"city": ["Paris"], "unit": "c"}'),))
    for changed in (renamed, missing_key, wrong_type, Answer("It is sunny.")):
        check = compare("t", "tool", Answer("", (WEATHER,)), changed)
        assert check.structured_ok is False and not check.exact, changed
    neither = compare("t", "tool", Answer("hello"), Answer("help"))
    assert neither.structured_ok is True and neither.detail.startswith("no tool calls produced")


def test_json_token_and_prose_checks() -> None:
    assert json_shape({"b": [1, 2], "a": "x"}) == {"a": "string", "b": ["list", ['"number"']]}
    assert compare("j", "json", Answer('{"name": "Ada", "age": 36}'), Answer('{"age": 1, "name": "B"}')).structured_ok
    assert compare("j", "json", Answer('{"name": "Ada"}'), Answer('{"name": 3}')).structured_ok is False
    assert compare("j", "json", Answer('{"name": "Ada"}'), Answer("Ada")).structured_ok is False
    assert compare("k", "token", Answer("Yes"), Answer("Yes ")).structured_ok is True
    assert compare("k", "token", Answer("Yes"), Answer("No")).structured_ok is False
    prose = compare("p", "prose", Answer("kitten"), Answer("sitting"))
    assert prose.structured_ok is None and prose.distance == 3 and not prose.exact
    assert edit_distance("", "abc") == 3 and edit_distance("same", "same") == 0


def test_answer_of_reads_tool_calls_and_tolerates_missing_fields() -> None:
    payload = {"choices": [{"message": {"content": None, "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}}]}
    assert answer_of(payload) == Answer("", (ToolCall("get_weather", '{"city": "Paris"}'),))
    assert answer_of({}) == Answer("")


def test_traffic_probes_keep_only_tool_call_bodies_capped() -> None:
    bodies: list[Mapping[str, Any]] = [
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4000, "tools": [{"type": "function"}],
         "stream": True},
        {"messages": [{"role": "user", "content": "no tools"}]},
    ]
    probes = traffic_probes(bodies)
    assert [p.name for p in probes] == ["traffic-0"] and probes[0].kind == "tool"
    assert probes[0].body["max_tokens"] == 128 and "stream" not in probes[0].body


class Scripted:
    """A target whose profiles answer from a script: {profile: {probe user text: message}}."""

    concurrent = False

    def __init__(self, script: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> None:
        self.script, self.current = script, ""
        self.bodies: list[Mapping[str, Any]] = []

    def active(self) -> str | None:
        return self.current

    def activate(self, profile: str) -> None:
        self.current = profile

    def complete(self, body: Mapping[str, Any], in_flight: int = 1) -> Reply:
        self.bodies.append(body)
        text = body["messages"][-1]["content"]
        return Reply({"choices": [{"message": self.script[self.current].get(text, {"content": "same"})}]}, 1.0)

    def vram_bytes(self) -> int | None:
        return None


def test_verify_profiles_flags_a_changed_tool_call_and_measures_prose_drift() -> None:
    tool = Probe("tool", "tool", {"messages": [{"role": "user", "content": "weather?"}], "max_tokens": 8})
    prose = Probe("prose", "prose", {"messages": [{"role": "user", "content": "story"}], "max_tokens": 8})
    call = {"content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": '{"city": "P"}'}}]}
    target = Scripted({"ref": {"weather?": call, "story": {"content": "Once upon a time"}},
                       "good": {"weather?": call, "story": {"content": "Once upon a tide"}},
                       "bad": {"weather?": {"content": "sunny"}, "story": {"content": "Once upon a time"}}})
    good = verify_profiles(target, "good", "ref", (tool, prose))
    assert good.structured_ok and good.exact_rate() == 0.5 and good.checks[1].distance == 1
    assert len(target.bodies) == 4  # two probes on each profile
    assert all(b["temperature"] == 0 and b["seed"] == 42 and b["cache_prompt"] is False for b in target.bodies)
    bad = verify_profiles(target, "bad", "ref", (tool, prose))
    assert not bad.structured_ok and [c.probe for c in bad.failures] == ["tool"]
    assert "FAILS 1 structured check" in bad.summary() and target.active() == "bad"


def _faster(candidate: str, ratio: float) -> Comparison:
    interval = Interval(ratio, ratio * 0.95, ratio * 1.05, 0.95, pairs=5, rounds=5)
    return Comparison(candidate, "plain", "wall", interval, interval, "faster", lengths_differ=0, busy_pairs=0)


def test_the_tuner_skips_a_winner_the_guard_rejects() -> None:
    cells = {"plain": summarize([100.0] * 5), "fast": summarize([50.0] * 5), "faster": summarize([40.0] * 5)}
    found = {"fast": _faster("fast", 0.5), "faster": _faster("faster", 0.4)}

    def decided(guard: Callable[[str], str | None], *, pinned: str | None = None,
                dry_run: bool = False) -> tuple[Decision, list[str]]:
        return guarded_decision(cells, found, "plain", guard, margin=0.05, pinned=pinned, dry_run=dry_run,
                                failed={}, level=None)

    decision, refused = decided(lambda p: "drifts" if p == "faster" else None)
    assert decision.best == "fast" and decision.switch and refused == ["not switching to faster: drifts"]
    kept, _ = decided(lambda p: "drifts")
    assert kept.best == "plain" and not kept.switch
    dry, refused = decided(lambda p: "drifts" if p == "faster" else None, dry_run=True)
    assert dry.best == "fast" and not dry.switch and dry.reason.startswith("would switch to fast") and refused
    asked: list[str] = []

    def ask(p: str) -> None:
        asked.append(p)

    pinned, _ = decided(ask, pinned="plain")
    assert not pinned.switch and asked == []  # no verification when there is no switch to gate


def _deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Deployment:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    shutil.copytree(REPO / "profiles" / "tiny", tmp_path / "profiles")
    return Deployment(unit="llama.service", scope="user", profiles_dir=tmp_path / "profiles")


def test_switch_warning_and_guard_follow_the_stored_verification(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    deployment = _deployment(tmp_path, monkeypatch)
    assert unverified_warning(deployment, "autoregressive") is None  # the reference needs no verification
    assert "never been verified" in str(unverified_warning(deployment, "ngram-simple"))
    target = Scripted({"autoregressive": {}, "ngram-simple": {"Is water wet? Answer yes or no.": {"content": "No"}}})
    guard = tuner_guard(deployment, target, ())
    reason = guard("ngram-simple")  # never verified: the guard verifies it now, on the target
    assert reason is not None and "token-yes-no" not in reason and "FAILS 1" in reason
    assert len(target.bodies) == 2 * len(BUILTIN_PROBES)
    assert "failed its last verification" in str(unverified_warning(deployment, "ngram-simple"))
    assert guard("ngram-simple") is not None and len(target.bodies) == 2 * len(BUILTIN_PROBES)  # stored, not rerun
    passing = verify_profiles(Scripted({"autoregressive": {}, "ngram-simple": {}}), "ngram-simple",
                              "autoregressive")
    save_verification(deployment, passing)
    assert unverified_warning(deployment, "ngram-simple") is None and guard("ngram-simple") is None
    (deployment.profiles_dir / "ngram-simple.toml").write_text(
        'inherits = "base"\n[speculative]\ntype = "ngram-simple"\ndraft_n_max = 8\n')
    assert "changed since it was verified" in str(unverified_warning(deployment, "ngram-simple"))


# --- the real tiny llama-server ---------------------------------------------------------------------


def test_verify_on_the_real_server_passes_twins_and_reports_drift(box: Box, real_server: None) -> None:
    shutil.copy(box.profiles_dir / "autoregressive.toml", box.profiles_dir / "twin.toml")
    box.specd("switch", "autoregressive", check=True)
    target = DeploymentTarget(box.deployment, seams=seams_for, trigger="verify")
    try:  # identical profiles, a few probes in-process (the CLI run below covers them all)
        with restoring(target):
            twin = verify_profiles(target, "twin", "autoregressive",
                                   [p for p in BUILTIN_PROBES if p.kind != "tool"][::2])
    finally:
        target.close()
    assert twin.checks and twin.structured_ok and twin.exact_rate() == 1.0, twin.summary()
    assert all(c.distance == 0 for c in twin.checks), twin.summary()
    run = box.specd("verify", "ngram-simple", "--json", timeout=400)
    drift = json.loads(run.stdout)
    assert run.returncode == (0 if drift["structured_ok"] else 1), run.stderr
    assert drift["against"] == "autoregressive" and len(drift["checks"]) == len(BUILTIN_PROBES)
    prose = [c for c in drift["checks"] if c["kind"] == "prose"]
    assert prose and all(c["exact"] == (c["distance"] == 0) for c in prose)
    print(f"\nspecd verify ngram-simple on the tiny server: {drift['summary']}")
    if not drift["tool_calls_produced"]:
        assert "no tool calls produced" in drift["summary"]
    assert json.loads(box.specd("status", "--json", check=True).stdout)["active_profile"] == "autoregressive"
