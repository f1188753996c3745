"""The health gate: a profile counts as up only when the alias endpoint really serves.

`/health` 200 (503 "Loading model" is normal while loading), `/v1/models` lists the alias, a
1-token completion to the alias succeeds, and then the unit keeps the same MainPID with no
restarts for a stability window — `Restart=on-failure` can otherwise hide a crash loop.

The completion waits in the server's queue like any request: on a busy server (a client's long
answer holding its one slot, clients reaching a restarted server before the gate does) it is
answered late, not never, so the gate gives it whatever is left of the health timeout (at least
COMPLETION_MIN_S) instead of the HTTP client's read timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from specd.deploy.systemd import UnitState
from specd.endpoint import http_client, shown
from specd.errors import HealthError

_POLL_S = 0.25
COMPLETION_MIN_S = 30.0


@dataclass(frozen=True)
class HealthResult:
    ok: bool
    detail: str
    load_s: float = 0.0
    total_s: float = 0.0


def _alias_listed(payload: Any, alias: str) -> bool:
    alias = alias.split(",")[0]
    for entry in payload.get("data", []) if isinstance(payload, dict) else []:
        if not isinstance(entry, dict):
            continue
        if entry.get("id") == alias or alias in (entry.get("aliases") or []):
            return True
    return False


def check_once(client: httpx.Client, base_url: str, alias: str | None, *, complete: bool = False,
               api_key: str | None = None, completion_timeout_s: float | None = None) -> HealthResult:
    """One probe: health, alias listed, and (optionally) a 1-token completion, given
    `completion_timeout_s` to answer (else the client's timeout).

    alias None is router mode: /v1/models must list the presets (any model); no completion, which
    would load one on demand. api_key is sent as a bearer token and never appears in a message."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        health = client.get(f"{base_url}/health", headers=headers)
        if health.status_code != 200:
            return HealthResult(False, f"/health answered {health.status_code}: {health.text[:120]}")
        models = client.get(f"{base_url}/v1/models", headers=headers)
        if models.status_code == 401:
            return HealthResult(False, "/v1/models answered 401: the server wants an API key "
                                       + ("and refused the profile's" if api_key else "(set api_key in the profile)"))
        if models.status_code != 200:
            return HealthResult(False, f"/v1/models answered {models.status_code}")
        if alias is None:
            if not models.json().get("data"):
                return HealthResult(False, "/v1/models lists no model (router mode: no preset or model found)")
            return HealthResult(True, "healthy")
        if not _alias_listed(models.json(), alias):
            ids = [str(m.get("id")) for m in models.json().get("data", []) if isinstance(m, dict)]
            return HealthResult(False, f"/v1/models does not list alias '{alias}' "
                                       f"(it lists {', '.join(ids) or 'nothing'})")
        if complete:
            body = {"model": alias, "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 1,
                    "temperature": 0}
            waited = httpx.Timeout(completion_timeout_s, connect=2.0) if completion_timeout_s else client.timeout
            try:
                answer = client.post(f"{base_url}/v1/chat/completions", json=body, headers=headers, timeout=waited)
            except httpx.TimeoutException as exc:
                return HealthResult(False, f"a 1-token completion to '{alias}' had no answer within "
                                           f"{waited.read or 0:.0f} s ({type(exc).__name__}; the server answers it "
                                           "after the requests ahead of it in its queue)")
            if answer.status_code != 200 or not answer.json().get("choices"):
                return HealthResult(False, f"a 1-token completion to '{alias}' failed: {answer.status_code} "
                                           f"{answer.text[:160]}")
    except httpx.HTTPError as exc:
        return HealthResult(False, f"{shown(base_url)} unreachable: {type(exc).__name__}: {exc}")
    except ValueError as exc:
        return HealthResult(False, f"{shown(base_url)} answered something that is not JSON: {exc}")
    return HealthResult(True, "healthy")


class _Steps:
    """Tells the step hook each check that passes, and what the server says while it loads (once per
    change). A listener's bug must not fail the gate."""

    def __init__(self, on_step: Callable[[str, str], None] | None) -> None:
        self._on_step = on_step
        self._last: tuple[str, str] | None = None

    def __call__(self, step: str, detail: str) -> None:
        if self._on_step is None or self._last == (step, detail):
            return
        self._last = (step, detail)
        try:
            self._on_step(step, detail)
        except Exception:
            logging.getLogger(__name__).exception("gate step hook failed at %s", step)


def wait_healthy(
    base_url: str,
    alias: str | None,
    *,
    timeout_s: float,
    stability_s: float,
    unit_state: Callable[[], UnitState],
    client: httpx.Client | None = None,
    clock: Callable[[], float] = time.monotonic,
    api_key: str | None = None,
    on_step: Callable[[str, str], None] | None = None,
) -> HealthResult:
    """Block until the gate passes; raise HealthError saying which check failed and why.

    `on_step(step, detail)` hears each check as it passes (and what the server says while it loads),
    for a live view of a switch; it must not raise."""
    tell = _Steps(on_step)

    own_client = client is None
    http = client or http_client(httpx.Timeout(30.0, connect=2.0))
    start = clock()
    deadline = start + timeout_s
    try:
        first = unit_state()
        restarts = first.n_restarts
        last_detail = "no answer yet"
        while True:
            state = unit_state()
            if state.active_state in ("failed", "inactive", "deactivating") or state.sub_state == "auto-restart":
                raise HealthError(f"llama-server exited while loading: {state.describe()}")
            if state.n_restarts > restarts:
                raise HealthError(f"llama-server crashed and was restarted by systemd while loading ({last_detail})")
            probe = check_once(http, base_url, alias, api_key=api_key)
            if probe.ok:
                break
            tell("gate-waiting", probe.detail)
            last_detail = probe.detail
            if "does not list alias" in probe.detail:
                raise HealthError(probe.detail)
            if clock() > deadline:
                raise HealthError(f"not healthy after {timeout_s:.0f} s: {last_detail}")
            time.sleep(_POLL_S)
        load_s = clock() - start
        tell("gate-health", f"/health 200 and /v1/models lists {alias or 'the presets'} after {load_s:.1f} s")
        probe = check_once(http, base_url, alias, complete=True, api_key=api_key,
                           completion_timeout_s=max(COMPLETION_MIN_S, deadline - clock()))
        if not probe.ok:
            raise HealthError(probe.detail)
        tell("gate-completion", f"a 1-token completion to {alias} answered" if alias else "router mode: no completion")
        settled = unit_state()
        window_end = clock() + stability_s
        while clock() < window_end:
            time.sleep(min(_POLL_S * 2, max(0.0, window_end - clock())))
            now = unit_state()
            if now.main_pid != settled.main_pid or now.n_restarts != settled.n_restarts or not now.running:
                raise HealthError(
                    f"llama-server did not stay up for the {stability_s:.0f} s stability window: "
                    f"{now.describe()}, MainPID {settled.main_pid} -> {now.main_pid}, "
                    f"restarts {settled.n_restarts} -> {now.n_restarts}"
                )
        final = check_once(http, base_url, alias, api_key=api_key)
        if not final.ok:
            raise HealthError(f"unhealthy at the end of the stability window: {final.detail}")
        tell("gate-stable", f"PID {settled.main_pid} stayed up with no restart for {stability_s:.0f} s")
        return HealthResult(True, "healthy", load_s=load_s, total_s=clock() - start)
    finally:
        if own_client:
            http.close()
