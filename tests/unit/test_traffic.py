"""Traffic records and summaries: what `specd traffic` and the tuner read."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from specd.cli.daemon_cmds import parse_duration
from specd.errors import HealthError, UsageError
from specd.traffic import records as traffic
from specd.traffic.records import Recorder, TrafficRecord
from tests.fakes.proxy_fakes import FakeBackendForProxyTests, ServerThread, free_port


def record(ts: float, **fields: object) -> TrafficRecord:
    base: dict[str, object] = {"endpoint": "/v1/chat/completions", "stream": False, "status": 200, "total_ms": 10.0,
                               "unit": "u.service"}
    return TrafficRecord(ts=ts, **{**base, **fields})  # type: ignore[arg-type]


def test_recorder_writes_every_record_and_summary_counts_them(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    recorder = Recorder(db)
    now = time.time()
    for index in range(250):
        recorder.record(record(now - index, completion_tokens=index, prompt_tokens=3 * index,
                               task_class="code" if index % 5 == 0 else "creative",
                               stream=index % 2 == 0, in_flight=index % 3))
    recorder.close()
    conn = traffic.open_db(db)
    summary = traffic.summarize(conn, now - 1000, unit="u.service")
    assert summary["requests"] == 250 and summary["succeeded"] == 250 and summary["streamed"] == 125
    assert summary["class_mix"] == {"code": 50, "creative": 200}
    assert sum(b["count"] for b in summary["output_tokens_hist"]) == 250
    assert summary["concurrency_at_start"] == {"0": 84, "1": 83, "2": 83}
    assert traffic.summarize(conn, now - 1000, unit="other.service")["requests"] == 0
    assert traffic.summarize(conn, now - 99.5)["requests"] == 100  # --since cuts by start time


def test_acceptance_and_decode_speed_are_per_profile(tmp_path: Path) -> None:
    conn = traffic.open_db(tmp_path / "state.db")
    now = time.time()
    traffic.insert_records(conn, [
        record(now, profile="mtp", draft_n=100, draft_n_accepted=80, predicted_n=200, predicted_ms=1000.0),
        record(now, profile="mtp", draft_n=100, draft_n_accepted=60, predicted_n=200, predicted_ms=3000.0),
        record(now, profile="plain", predicted_n=50, predicted_ms=1000.0),
        record(now, profile="mtp", status=503, draft_n=999, draft_n_accepted=0),  # a failure is not counted
    ])
    acceptance = traffic.summarize(conn, now - 10)["acceptance"]
    assert acceptance["mtp"]["rate"] == pytest.approx(0.7)
    assert acceptance["mtp"]["decode_tok_s"] == pytest.approx(100.0)
    assert acceptance["plain"]["rate"] is None and acceptance["plain"]["decode_tok_s"] == pytest.approx(50.0)


@given(st.lists(st.integers(min_value=0, max_value=200_000), max_size=200))
def test_histogram_puts_every_value_in_exactly_the_bucket_that_holds_it(values: list[int]) -> None:
    buckets = traffic.histogram(values)
    assert sum(int(b["count"] or 0) for b in buckets) == len(values)
    for bucket in buckets:
        lo, hi = int(bucket["lo"] or 0), bucket["hi"]
        expected = sum(1 for v in values if v >= lo and (hi is None or v < hi))
        assert bucket["count"] == expected


def test_counter_parsing_and_restart_aware_deltas(tmp_path: Path) -> None:
    text = ("# HELP llamacpp:prompt_tokens_total x\n# TYPE llamacpp:prompt_tokens_total counter\n"
            "llamacpp:prompt_tokens_total 100\nllamacpp:tokens_predicted_total 40\n"
            "llamacpp:spec_decode_num_draft_tokens_total 20\nllamacpp:spec_decode_num_accepted_tokens_total 15\n"
            "llamacpp:requests_processing 1\nnot a metric line\n")
    counters = traffic.parse_counters(text)
    assert counters == {"prompt_tokens": 100, "predicted_tokens": 40, "draft_tokens": 20, "accepted_tokens": 15}
    conn = traffic.open_db(tmp_path / "state.db")
    now = time.time()
    traffic.record_sample(conn, counters, unit="u", profile="mtp", ts=now - 30)
    traffic.record_sample(conn, {**counters, "predicted_tokens": 100, "draft_tokens": 60, "accepted_tokens": 45},
                          unit="u", profile="mtp", ts=now - 20)
    # the server restarted (a switch): counters start over, and the delta is the new value
    traffic.record_sample(conn, {"predicted_tokens": 10, "draft_tokens": 0, "accepted_tokens": 0},
                          unit="u", profile="plain", ts=now - 10)
    totals = traffic.counter_totals(conn, now - 60).by_profile
    assert totals["mtp"]["predicted_tokens"] == 60 and totals["mtp"]["draft_tokens"] == 40
    assert totals["plain"]["predicted_tokens"] == 10
    sampled = traffic.summarize(conn, now - 60)["sampled_counters"]
    assert sampled["mtp"]["acceptance_rate"] == pytest.approx(0.75)


def test_sampling_reads_a_live_metrics_endpoint_and_explains_a_missing_one() -> None:
    fake = FakeBackendForProxyTests()
    server = ServerThread(fake.app, free_port()).start()
    try:
        with httpx.Client() as client:
            httpx.post(f"{server.url}/v1/chat/completions", json={"messages": []}, timeout=5)
            assert traffic.sample_metrics(client, server.url)["predicted_tokens"] == 8
            with pytest.raises(HealthError, match="--metrics"):
                traffic.sample_metrics(client, f"{server.url}/nothing-here")
    finally:
        server.stop()


def test_prune_drops_old_rows_only(tmp_path: Path) -> None:
    conn = traffic.open_db(tmp_path / "state.db")
    now = time.time()
    traffic.insert_records(conn, [record(now - 100), record(now - 1)])
    traffic.record_sample(conn, {"predicted_tokens": 1}, ts=now - 100)
    assert traffic.prune(conn, now - 50) == 2
    assert [r.ts for r in traffic.fetch_records(conn, 0)] == [now - 1]


def test_durations() -> None:
    assert [parse_duration(t) for t in ("90", "90s", "30m", "24h", "7d", "1w")] == [90, 90, 1800, 86400, 604800,
                                                                                      604800]
    with pytest.raises(UsageError):
        parse_duration("yesterday")


def test_traffic_command_reports_requests_in_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    config = tmp_path / "specd.toml"
    config.write_text(f'unit = "u.service"\nprofiles_dir = "{tmp_path}"\n')
    conn = traffic.open_db()
    now = time.time()
    traffic.insert_records(conn, [record(now - 10, completion_tokens=5), record(now - 7200, completion_tokens=5)])
    conn.close()
    from specd.cli import _register_commands, app

    _register_commands()
    result = CliRunner().invoke(app, ["traffic", "--since", "1h", "--json", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["requests"] == 1
    text = CliRunner().invoke(app, ["traffic", "--since", "1d", "--config", str(config)])
    assert "2 requests" in text.output


def test_a_state_file_deleted_under_long_lived_writers_is_recreated_and_written(tmp_path: Path) -> None:
    # The daemon keeps its history and traffic connections open for days; an owner who deletes
    # specd.db must find what the daemon records afterwards in the new file, not in the deleted one.
    from specd.deploy.history import History

    db = tmp_path / "state.db"
    history, recorder = History(db), Recorder(db, interval_s=0.05)
    try:
        history.event("u.service", "before", "written before the deletion")
        recorder.record(TrafficRecord(ts=time.time(), endpoint="/v1/chat/completions", stream=False, status=200,
                                      total_ms=1.0, unit="u.service"))
        recorder.flush()
        for path in tmp_path.glob("state.db*"):
            path.unlink()
        history.event("u.service", "after", "written after the deletion")
        recorder.record(TrafficRecord(ts=time.time(), endpoint="/v1/chat/completions", stream=False, status=200,
                                      total_ms=1.0, unit="u.service"))
        recorder.flush()
    finally:
        recorder.close()
    reader, conn = History(db), traffic.open_db(db)
    try:
        assert [row["kind"] for row in reader.events("u.service")] == ["after"]
        assert len(traffic.fetch_records(conn, 0.0)) == 1
    finally:
        reader.close()
        conn.close()
