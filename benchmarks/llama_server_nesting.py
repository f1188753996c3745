"""How deep a JSON nest the pinned llama-server survives, by where the nest sits in a chat body.

    python benchmarks/llama_server_nesting.py [--out benchmarks/results/llama-server-nesting.md]

The proxy must not refuse a body llama-server accepts (issue 36), so what it accepts is measured,
not assumed: llama-server's JSON parser (nlohmann/json) is iterative and reads any depth, but later
code walks some parts of the body recursively and the server dies of a stack overflow (SIGSEGV).
For each placement the depth is bisected between LOW and HIGH (to 5%): a depth "survives" when the
server answers it (any status) and then still answers a plain one-token request; after a crash the
server is started again. The server: ~/.cache/specd's build with the tiny model, one slot, one
thread, on 127.0.0.1. Prints and writes the figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from proxy_overhead import LLAMA_SERVER, TINY_MODEL, free_port

LOW, HIGH = 100, 400_000
CHAT = b'{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":2,'
PLACES: dict[str, Callable[[int], bytes]] = {
    "arrays in a field llama-server ignores": lambda d: CHAT + b'"x_nest":' + b"[" * d + b"]" * d + b"}",
    "objects in a field llama-server ignores": lambda d: CHAT + b'"x_nest":' + b'{"a":' * d + b"1" + b"}" * d + b"}",
    "a message's content": lambda d: (b'{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":'
                                      + b"[" * d + b"]" * d + b"}]}"),
    "a tool's parameters": lambda d: (CHAT + b'"tools":[{"type":"function","function":{"name":"f","parameters":'
                                      + b'{"a":' * d + b"1" + b"}" * d + b"}}]}"),
    "a response_format schema": lambda d: (CHAT + b'"response_format":{"type":"json_schema","json_schema":'
                                           b'{"name":"x","schema":' + b'{"type":"array","items":' * d
                                           + b'{"type":"string"}' + b"}" * d + b"}}}"),
    "the whole body (arrays)": lambda d: b"[" * d + b"]" * d,
}


class Server:
    def __init__(self, log: Path) -> None:
        self.port, self.log = free_port(), log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [str(LLAMA_SERVER), "-m", str(TINY_MODEL), "--host", "127.0.0.1", "--port", str(self.port),
                 "-c", "1024", "-np", "1", "-t", "1", "--alias", "tiny"], stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while not self.answers(b'{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":1}'):
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama-server did not start (log: {self.log})")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()

    def ask(self, body: bytes) -> str:
        """The status line of the answer, or what happened instead."""
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=120) as sock:
                sock.sendall(head + body)
                received = b""
                while b"\r\n" not in received:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return "closed without an answer"
                    received += chunk
                return received.split(b"\r\n", 1)[0].decode(errors="replace")
        except OSError as exc:
            return type(exc).__name__

    def answers(self, body: bytes) -> bool:
        return self.ask(body).startswith("HTTP/1.1 200")

    def survives(self, body: bytes) -> tuple[bool, str]:
        answer = self.ask(body)
        time.sleep(0.3)
        alive = (self.process is not None and self.process.poll() is None
                 and self.answers(CHAT[:-1] + b"}"))
        if not alive:
            self.stop()
            self.start()
        return alive, answer


def bisect(server: Server, make: Callable[[int], bytes]) -> dict[str, object]:
    alive, answer = server.survives(make(HIGH))
    if alive:
        return {"survives": HIGH, "crashes": None, "answer_at_survives": answer}
    low, high, low_answer = LOW, HIGH, ""
    while high - low > max(low // 20, 50):
        middle = (low + high) // 2
        alive, answer = server.survives(make(middle))
        if alive:
            low, low_answer = middle, answer
        else:
            high = middle
    return {"survives": low, "crashes": high, "answer_at_survives": low_answer}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not (LLAMA_SERVER.exists() and TINY_MODEL.exists()):
        sys.exit(f"llama_server_nesting: {LLAMA_SERVER} or {TINY_MODEL} is missing")
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    load = os.getloadavg()[0]
    server = Server(Path(f"/tmp/llama-server-nesting-{os.getpid()}.log"))
    server.start()
    results = {}
    try:
        for place, make in PLACES.items():
            results[place] = bisect(server, make)
            print(place, results[place], flush=True)
    finally:
        server.stop()
    lines = [
        "# How deep a JSON nest the pinned llama-server survives",
        "",
        f"- command: `{shlex.join(['python', *sys.argv])}`",
        (f"- machine: {platform.node()}: {' '.join(platform.uname())}, {os.cpu_count()} CPUs; 1-minute load "
        f"average {load:.1f} at the start (a box shared with other jobs)"),
        f"- date: {started}; server: {LLAMA_SERVER} (the pinned build) with {TINY_MODEL.name}, `-np 1 -t 1`",
        ("- what: per placement, the deepest nest the server answered and still answered a plain request after, "
        f"and the shallowest it died on (bisected between {LOW:,} and {HIGH:,} to 5%); truth: the server's own "
        "answers and its process; the proxy (issue 36) forwards every one of these bodies"),
        "",
        "| where the nest sits | survives | dies at | its answer at the depth it survives |",
        "|---|---|---|---|",
    ]
    for place, found in results.items():
        dies = "not up to " + f"{HIGH:,}" if found["crashes"] is None else f"{found['crashes']:,}"
        lines.append(f"| {place} | {found['survives']:,} | {dies} | {found['answer_at_survives']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps({"date": started, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
