"""The Grafana dashboard and the Prometheus rules in monitoring/ against a REAL Prometheus (Debian's
package) scraping a running specd daemon and the real llama-server: the rules load (`promtool check
rules` and Prometheus itself, every rule evaluating without error), every series the dashboard and
the rules name exists, and every dashboard query runs and returns data."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import yaml

from specd.setup.sandbox import free_port
from tests.conftest import REPO, Box
from tests.fakes.proxy_fakes import read_stream
from tests.system.daemon_rig import chat, real_stack
from tests.system.prometheus_rig import ScrapeJob, prometheus, promtool_check_rules
from tests.system.test_tune_real import FUNCTIONS

RULES = REPO / "monitoring" / "specd-rules.yml"
DASHBOARD = REPO / "monitoring" / "grafana-specd.json"
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: strings, label matchers, ranges and grouping
    clauses removed; what is left that is not a function call or a keyword is a metric name."""
    bare = re.sub(r'"[^"]*"', "", expr)
    bare = re.sub(r"\{[^}]*\}", "", bare)
    bare = re.sub(r"\[[^\]]*\]", "", bare)
    bare = GROUPING.sub("", bare)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", bare):
        if bare[match.end():].lstrip().startswith("(") or match.group(0).lower() in KEYWORDS:
            continue
        names.add(match.group(0))
    return names


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def rule_exprs() -> list[str]:
    return [rule["expr"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_metric_names_are_read_out_of_promql() -> None:
    assert metric_names('histogram_quantile(0.95, sum by (le, instance) (rate(specd_proxy_ttft_seconds_bucket'
                        '{unit=~"$unit"}[5m])))') == {"specd_proxy_ttft_seconds_bucket"}
    assert metric_names("specd:x:ratio < 0.3 and rate(llamacpp:spec_decode_num_draft_tokens_total[15m]) > 0") \
        == {"specd:x:ratio", "llamacpp:spec_decode_num_draft_tokens_total"}


@real_stack
def test_a_real_prometheus_scrapes_specd_and_llama_server_and_every_series_exists(
        box: Box, start_daemon: Any, tmp_path: Path) -> None:
    assert "SUCCESS: 11 rules found" in promtool_check_rules(RULES)
    box.specd("switch", "ngram-simple", check=True)  # speculation on: the draft counters move
    metrics_port = free_port()
    daemon = start_daemon(daemon_extra=f'metrics_listen = "127.0.0.1:{metrics_port}"\n')
    code = "".join(FUNCTIONS * 2)  # repeating the prompt back is what n-gram drafts catch
    repeat = {**chat(False, 96), "messages": [{"role": "user", "content": f"Repeat this code exactly:\n{code}"}]}
    with httpx.Client(timeout=120) as client:
        for _ in range(2):
            assert client.post(f"{daemon.proxy_url}/v1/chat/completions", json=repeat).status_code == 200
            assert read_stream(client, f"{daemon.proxy_url}/v1/chat/completions", chat(True))[-1] == "[DONE]"

    jobs = [ScrapeJob("specd", [f"127.0.0.1:{metrics_port}"]), ScrapeJob("llama-server", [f"127.0.0.1:{box.port}"])]
    with prometheus(jobs, tmp_path / "prometheus", rule_files=[RULES]) as prom:
        prom.wait_for_targets_up()
        groups = prom.wait_for("every rule evaluated", lambda: (found := prom.rule_groups()) and all(
            rule["lastEvaluation"] > "2000" for group in found for rule in group["rules"]) and found)
        assert {g["name"] for g in groups} == {"specd.recording", "specd.alerts"}
        assert [r["name"] for g in groups for r in g["rules"] if r["health"] != "ok"] == []

        exprs = dashboard_exprs() + rule_exprs()
        names = set().union(*(metric_names(e) for e in exprs)) - {"up"}
        assert {"specd_backend_healthy", "specd_rollbacks_total", "llamacpp:tokens_predicted_total",
                "llamacpp:spec_decode_num_accepted_tokens_total", "llamacpp:requests_deferred"} <= names
        for name in sorted(names):
            prom.wait_for(f"a series of {name}", lambda name=name: prom.series(name))
        unit = box.unit
        instance = f"127.0.0.1:{box.port}"
        for expr in dashboard_exprs():
            query = expr.replace("$unit", unit).replace("$instance", instance).replace("$__rate_interval", "1m")
            prom.wait_for(f"data for the dashboard query {query}", lambda query=query: prom.query(query))
        healthy = prom.query(f'specd_backend_healthy{{unit="{unit}"}}')
        assert healthy[0]["value"][1] == "1"
        active = prom.query(f'specd_active_profile{{unit="{unit}"}} == 1')
        assert [r["metric"]["profile"] for r in active] == ["ngram-simple"]
        drafted = prom.query("llamacpp:spec_decode_num_draft_tokens_total")
        assert float(drafted[0]["value"][1]) > 0, "ngram-simple drafted nothing on a repeat prompt"
