"""A real Prometheus (Debian's `prometheus` package) for system tests: a generated config on a free
loopback port, a throwaway storage directory, ready when `/-/ready` says so, stopped by its PID.

    with prometheus([ScrapeJob("specd", ["127.0.0.1:9101"])], tmp_path, rule_files=[rules]) as prom:
        prom.wait_for_series('specd_backend_healthy{unit="x"}')
        prom.query("up")

`promtool_check_rules` runs `promtool check rules` (the same package) and returns its output, raising
with that output when the rules do not load. Nothing here knows about specd: any test that needs a
real scraper can use it.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

PROMETHEUS = "prometheus"
PROMTOOL = "promtool"
INSTALL_HINT = "install Debian's `prometheus` package (scripts/install-system-deps.sh --test does)"


@dataclass(frozen=True)
class ScrapeJob:
    """One scrape job: `targets` are host:port, scraped at `metrics_path` every `interval_s`."""

    name: str
    targets: Sequence[str]
    metrics_path: str = "/metrics"
    interval_s: float = 1.0
    labels: dict[str, str] = field(default_factory=dict)

    def as_config(self) -> dict[str, Any]:
        static: dict[str, Any] = {"targets": list(self.targets)}
        if self.labels:
            static["labels"] = dict(self.labels)
        return {"job_name": self.name, "metrics_path": self.metrics_path,
                "scrape_interval": _duration(self.interval_s), "scrape_timeout": _duration(min(self.interval_s, 5.0)),
                "static_configs": [static]}


def _duration(seconds: float) -> str:
    return f"{int(seconds * 1000)}ms"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def binary(name: str) -> str:
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if found is None:
        raise AssertionError(f"`{name}` is not installed: {INSTALL_HINT}")
    return found


def write_config(path: Path, jobs: Sequence[ScrapeJob], rule_files: Sequence[Path] = (),
                 evaluation_interval_s: float = 1.0) -> Path:
    """prometheus.yml for these jobs and rule files. JSON is YAML, so no YAML writer is needed."""
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": _duration(evaluation_interval_s)},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [job.as_config() for job in jobs],
    }
    path.write_text(json.dumps(config, indent=2))
    return path


class Prometheus:
    """A running Prometheus; `url` is its HTTP API."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, root: Path) -> None:
        self.process = process
        self.port = port
        self.root = root
        self.url = f"http://127.0.0.1:{port}"
        self._http = httpx.Client(timeout=10.0)

    @property
    def log_path(self) -> Path:
        return self.root / "prometheus.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:] if self.log_path.exists() else "(no log)"

    def _api(self, path: str, params: dict[str, Any] | None = None) -> Any:
        response = self._http.get(f"{self.url}/api/v1/{path}", params=params)
        payload = response.json()
        if payload.get("status") != "success":
            raise AssertionError(f"prometheus {path} {params}: {payload.get('errorType')}: {payload.get('error')}")
        return payload["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector (each item has `metric` and `value`)."""
        data = self._api("query", {"query": expr})
        result: list[dict[str, Any]] = data["result"] if data["resultType"] == "vector" else [data]
        return result

    def series(self, match: str) -> list[dict[str, str]]:
        """The label sets of every series `match` selects over the last hour."""
        found: list[dict[str, str]] = self._api("series", {"match[]": match, "start": time.time() - 3600})
        return found

    def metric_names(self) -> set[str]:
        names: list[str] = self._api("label/__name__/values")
        return set(names)

    def targets(self) -> list[dict[str, Any]]:
        active: list[dict[str, Any]] = self._api("targets")["activeTargets"]
        return active

    def rule_groups(self) -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = self._api("rules")["groups"]
        return groups

    def wait_for(self, what: str, condition: Any, timeout_s: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            last = condition()
            if last:
                return last
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})\n"
                             f"--- prometheus log ---\n{self.log()}")

    def wait_for_series(self, expr: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Wait until the instant query `expr` returns at least one sample."""
        found: list[dict[str, Any]] = self.wait_for(f"a sample of {expr}", lambda: self.query(expr), timeout_s)
        return found

    def wait_for_targets_up(self, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        def all_up() -> list[dict[str, Any]] | None:
            targets = self.targets()
            return targets if targets and all(t["health"] == "up" for t in targets) else None
        up: list[dict[str, Any]] = self.wait_for("every scrape target up", all_up, timeout_s)
        return up

    def stop(self, timeout_s: float = 30.0) -> None:
        self._http.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def start_prometheus(jobs: Sequence[ScrapeJob], root: Path, *, rule_files: Sequence[Path] = (),
                     ready_timeout_s: float = 60.0) -> Prometheus:
    """Start Prometheus under `root` (config, storage, log) and wait for /-/ready."""
    root.mkdir(parents=True, exist_ok=True)
    config = write_config(root / "prometheus.yml", jobs, rule_files)
    port = _free_port()
    log = (root / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [binary(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={root / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h", "--log.level=info"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=root)
    log.close()
    prom = Prometheus(process, port, root)
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"prometheus exited with {process.returncode}\n{prom.log()}")
        try:
            if httpx.get(f"{prom.url}/-/ready", timeout=2.0).status_code == 200:
                return prom
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    prom.stop()
    raise AssertionError(f"prometheus not ready after {ready_timeout_s:.0f} s\n{prom.log()}")


@contextmanager
def prometheus(jobs: Sequence[ScrapeJob], root: Path, *, rule_files: Sequence[Path] = (),
               ready_timeout_s: float = 60.0) -> Iterator[Prometheus]:
    prom = start_prometheus(jobs, root, rule_files=rule_files, ready_timeout_s=ready_timeout_s)
    try:
        yield prom
    finally:
        prom.stop()


def promtool_check_rules(*rule_files: Path) -> str:
    """`promtool check rules FILES`: its output; AssertionError with that output when they do not load."""
    result = subprocess.run([binary(PROMTOOL), "check", "rules", *map(str, rule_files)], capture_output=True,
                            text=True, timeout=60, check=False)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise AssertionError(f"promtool check rules failed ({result.returncode}):\n{output}")
    return output


def promtool_check_config(config: Path) -> str:
    result = subprocess.run([binary(PROMTOOL), "check", "config", str(config)], capture_output=True, text=True,
                            timeout=60, check=False)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise AssertionError(f"promtool check config failed ({result.returncode}):\n{output}")
    return output
