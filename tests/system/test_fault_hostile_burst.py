"""Issue 36's five hostile bodies, one phase after another, through the real daemon's proxy.

The phases, each once: one 60 MB chat body padded with small JSON objects (7.5 million `{"k":1},`),
three 30 MB ones at once, 32 of 1 MB at once, a body holding a 200,000-deep nest of arrays, and ten
uploads that declare 60 MB, send 30 MB and stop. A client asks `GET /v1/models` through the proxy
every 20 ms throughout. What an owner expects:

- the daemon's memory follows what it holds, not the bodies' shape: its peak RSS (the kernel's
  VmHWM, reset at each phase) under PEAK_BUDGET_MB in every phase (before issue 36's changes: 1.0 to
  2.4 GB, benchmarks/results/hostile-bodies.md), and back under IDLE_BOUND_MB within SETTLE_S of the
  last client leaving (before: 1.1 GB a minute after);
- every whole body reaches the backend once, byte for byte, and its client gets the backend's own
  answer; of the stopped uploads, those past the daemon-wide bound (`[daemon] max_held_body_bytes`)
  are answered 503 with Retry-After at once and the rest are held, no more than the bound, and let
  go when their clients leave (the 408 at the 60 s body timeout is tests/unit/test_proxy_bodies.py's
  and the benchmark's);
- `/v1/models` answers throughout, never waiting LONGEST_MODELS_WAIT_S (before: the 60 MB body held
  it 9 to 22 s, the three 30 MB ones 12 to 14 s). Issue 36's "p99 under 100 ms" is the quiet-box
  figure of benchmarks/hostile_bodies.py (hostile-bodies.md), not asserted here: a wall-clock
  percentile on a shared 2-core CI box would fail on the box's load, not the daemon's.

The backend is the FAKE llama-server (tests/fakes/fake_llama_server.py) as the unit, started by a
real `specd switch`: the real llama-server parses every one of these bodies into its own JSON tree,
which on CI's 2 cores takes longer than this test may and would measure llama-server, not the
daemon. The FAKE reads each body whole, logs its sha256 and answers at once. What the real one
answers to deep nests through the proxy: test_fault_hostile_bodies.py.
"""

from __future__ import annotations

import hashlib
import select
import socket
import threading
import time
from pathlib import Path
from typing import Any

from specd.profiles.config import DEFAULT_HELD_BODY_BYTES
from tests import hostile_bodies as hostile
from tests.conftest import Box
from tests.system.daemon_rig import real_stack
from tests.system.fault_results import FaultRecorder
from tests.system.test_fault_backend import deliveries, fake_deployment

PEAK_BUDGET_MB = 300.0
IDLE_BOUND_MB = 150.0
SETTLE_S = 60.0
LONGEST_MODELS_WAIT_S = 2.0
MODELS_PERIOD_S = 0.02
UPLOADS, DECLARED, SENT = 10, 60_000_000, 30_000_000
ESTABLISHED = "01"  # the state column of /proc/net/tcp


def unread_bytes(client: socket.socket, server_port: int) -> int | None:
    """Bytes `client` sent that the server has not read yet (in either end's kernel queue), from
    /proc/net/tcp; None while the server's end is not an open connection (it closed, or refused)."""
    client_port = client.getsockname()[1]
    queues: dict[tuple[int, int], tuple[int, int, str]] = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        tx, rx = (int(queue, 16) for queue in fields[4].split(":"))
        queues[int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16)] = (tx, rx, fields[3])
    server, ours = queues.get((server_port, client_port)), queues.get((client_port, server_port))
    if server is None or ours is None or server[2] != ESTABLISHED:
        return None
    return ours[0] + server[1]


class StoppedUploads:
    """The ten uploads that stop halfway, and what became of each: the head of its answer, or "held"
    once the proxy has read every byte sent and answered nothing."""

    def __init__(self, port: int, uploads: list[tuple[socket.socket, str | None]]) -> None:
        self.port, self.sockets = port, [sock for sock, _ in uploads]
        self.answers: dict[int, str] = {}

    def settled(self) -> list[str] | None:
        """Each upload's answer or "held", once every one has one of them; None before."""
        seen: list[str] = []
        for index, sock in enumerate(self.sockets):
            if index not in self.answers and select.select([sock], [], [], 0)[0]:
                try:
                    self.answers[index] = sock.recv(4096).split(b"\r\n\r\n", 1)[0].decode(errors="replace")
                except OSError as exc:
                    self.answers[index] = type(exc).__name__
            if index in self.answers:
                seen.append(self.answers[index])
            elif unread_bytes(sock, self.port) == 0:
                seen.append("held")
        return seen if len(seen) == len(self.sockets) else None

    def hang_up(self) -> None:
        for sock in self.sockets:
            sock.close()


def phase(pid: int, port: int, body: bytes, clients: int) -> tuple[list[dict[str, Any]], float]:
    """`clients` sending `body` at once: their answers, and the daemon's peak RSS (MiB) meanwhile."""
    hostile.reset_peak(pid)
    answers = hostile.at_once(clients, lambda: hostile.post(port, body))
    return answers, hostile.memory_mb(pid)["VmHWM"]


@real_stack
def test_issue_36s_bodies_one_after_another_keep_the_daemon_small_and_v1_models_answering(
        box: Box, start_daemon: Any, fault_results: FaultRecorder) -> None:
    daemon, fake_log = fake_deployment(box, start_daemon)
    pid, port = daemon.main_pid(daemon.unit), daemon.proxy_port
    big, half, small = (hostile.small_objects_body(size, "tiny") for size in (60_000_000, 30_000_000, 1_000_000))
    nest = hostile.deep_nest_body(200_000, "tiny")
    idle_mb = hostile.memory_mb(pid)["VmRSS"]
    models: list[tuple[float, float]] = []
    stop = threading.Event()
    watcher = threading.Thread(target=hostile.ask_models, args=(daemon.proxy_url, models, stop, MODELS_PERIOD_S),
                               daemon=True)
    watcher.start()
    daemon.wait_for("/v1/models to answer through the proxy", lambda: models)
    try:
        sent = {"one 60 MB body": (big, 1), "three 30 MB at once": (half, 3), "32 x 1 MB at once": (small, 32),
                "a 200,000-deep nest": (nest, 1)}
        answered = {name: phase(pid, port, body, clients) for name, (body, clients) in sent.items()}
        hostile.reset_peak(pid)
        uploads = StoppedUploads(port, hostile.at_once(UPLOADS, lambda: hostile.start_partial_upload(
            port, DECLARED, memoryview(big)[:SENT], timeout_s=60)))
        try:
            outcomes: list[str] = daemon.wait_for("every stopped upload to be refused or read whole",
                                                  uploads.settled, 60)
            uploads_peak_mb = hostile.memory_mb(pid)["VmHWM"]
        finally:
            uploads.hang_up()
        left = time.monotonic()
        while hostile.memory_mb(pid)["VmRSS"] >= IDLE_BOUND_MB and time.monotonic() - left < SETTLE_S:
            time.sleep(0.5)
        settled_s, after_mb = time.monotonic() - left, hostile.memory_mb(pid)["VmRSS"]
        served_after = hostile.post(port, hostile.small_objects_body(10_000, "tiny"))
    finally:
        stop.set()
        watcher.join(60)

    for name, (answers, _) in answered.items():  # the backend's own answer, whole, for every whole body
        assert all(a["status"] == 200 and '"content": "OK"' in a["body"] for a in answers), (name, answers)
    got = deliveries(fake_log)
    for name, (body, clients) in sent.items():  # each reached the backend once per client, byte for byte
        assert got.count(hashlib.sha256(body).hexdigest()) == clients, name
    refused = [o for o in outcomes if o != "held"]
    assert all(o.startswith("HTTP/1.1 503") and "retry-after:" in o.lower() for o in refused), outcomes
    assert outcomes.count("held") * SENT <= DEFAULT_HELD_BODY_BYTES, outcomes  # held: no more than the bound
    peaks = {name: peak for name, (_, peak) in answered.items()} | {"ten stopped uploads": uploads_peak_mb}
    assert max(peaks.values()) < PEAK_BUDGET_MB, peaks
    assert after_mb < IDLE_BOUND_MB, (after_mb, settled_s)
    assert served_after["status"] == 200, served_after
    figures = hostile.percentiles([seconds for _, seconds in models])
    assert max(seconds for _, seconds in models) < LONGEST_MODELS_WAIT_S, figures  # a failed one counts as inf
    fault_results.record(
        "issue 36's bodies one after another (60 MB of small objects; 3 x 30 MB at once; 32 x 1 MB at once; "
        "a 200,000-deep nest; 10 uploads of 60 MB that stop at 30 MB), /v1/models asked every 20 ms (FAKE backend)",
        bound=(f"every whole body delivered once and answered by the backend; the stopped uploads 503 or held within "
               f"the {DEFAULT_HELD_BODY_BYTES >> 20} MiB bound; daemon peak RSS < {PEAK_BUDGET_MB:g} MB in every "
               f"phase; RSS < {IDLE_BOUND_MB:g} MB within {SETTLE_S:g} s of the last client leaving; no /v1/models "
               f"wait of {LONGEST_MODELS_WAIT_S:g} s, none failed"),
        measured=(f"peak RSS MB: {', '.join(f'{name} {peak:.0f}' for name, peak in peaks.items())} (idle "
                  f"{idle_mb:.0f}); uploads: {len(refused)} x 503, {outcomes.count('held')} held; RSS {after_mb:.0f} "
                  f"MB {settled_s:.1f} s after they left; /v1/models n {figures['n']}, p50 {figures['p50']} ms, "
                  f"p99 {figures['p99']} ms, max {figures['max']} ms"))
