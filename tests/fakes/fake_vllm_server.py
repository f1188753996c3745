"""FAKE `vllm` command: speaks vLLM's endpoints and metrics, runs no model.

The CI machine has no vLLM (its install takes minutes and a GB of downloads, and each real start
another one or two: benchmarks/results/vllm-cpu.md), so the fast system tier runs specd's vLLM engine
against this fake under the private systemd; the real vLLM tier (SPECD_VLLM_TESTS=1) runs the same
tests against `vllm-cpu`. What the fake stands in for, and what it does not:

- `vllm serve --help=all` prints the real vLLM 0.32.0's help, kept verbatim in
  tests/corpus/vllm/ (so specd's flag and method checks read real text); it has no SpeculativeConfig
  to introspect (specd then leaves those keys to vLLM, as for a launcher).
- `vllm serve MODEL --served-model-name NAME --host H --port P ...` refuses a model directory without
  config.json and a `--gpu-memory-utilization` above 0.9 the way vLLM 0.32.0 on a CPU box does (the
  same last lines in the journal, exit 1, after a moment of "loading"); otherwise, after
  `SPECD_FAKE_VLLM_STARTUP_S` seconds (default 2) with no port open, as vLLM opens it only when ready,
  serves: `/health` (200, empty body), `/v1/models` (the served name, owned_by vllm),
  `/v1/chat/completions` and `/v1/completions` (vLLM's shape: usage, no `timings`), `/metrics`
  (vLLM's names; the `vllm:spec_decode_*` counters only with `--speculative-config`, each answer of n
  tokens counting n drafted and n // 2 accepted, as vLLM registers them only with a speculator).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HELP = Path(__file__).resolve().parents[1] / "corpus" / "vllm" / "serve-help-all-0.32.0-cpu.txt"


class State:
    def __init__(self, served: str, model: str, speculative: dict[str, Any] | None) -> None:
        self.served, self.model, self.speculative = served, model, speculative
        self.lock = threading.Lock()
        self.running = 0
        self.generated = 0
        self.drafted = 0
        self.accepted = 0
        self.drafts = 0

    def metrics(self) -> str:
        labels = f'{{engine="0",model_name="{self.served}"}}'
        lines = [f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{labels} {float(self.running)}",
                 f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{labels} 0.0",
                 f"# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total{labels} {float(self.generated)}"]
        if self.speculative is not None:
            lines += [(f"# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total{labels} "
                      f"{float(self.drafts)}"),
                      (f"# TYPE vllm:spec_decode_num_draft_tokens counter\nvllm:spec_decode_num_draft_tokens_total"
                      f"{labels} {float(self.drafted)}"),
                      (f"# TYPE vllm:spec_decode_num_accepted_tokens counter\n"
                      f"vllm:spec_decode_num_accepted_tokens_total{labels} {float(self.accepted)}")]
        return "\n".join(lines) + "\n"


def handler_for(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, b"")
            elif self.path == "/v1/models":
                entry = {"id": state.served, "object": "model", "owned_by": "vllm", "root": state.model,
                         "max_model_len": 512}
                self._send(200, json.dumps({"object": "list", "data": [entry]}).encode())
            elif self.path == "/metrics":
                with state.lock:
                    text = state.metrics()
                self._send(200, text.encode(), "text/plain; version=0.0.4")
            else:
                self._send(404, b'{"detail":"Not Found"}')

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path not in ("/v1/chat/completions", "/v1/completions"):
                self._send(404, b'{"detail":"Not Found"}')
                return
            if body.get("model") != state.served:
                message = f"The model `{body.get('model')}` does not exist."
                self._send(404, json.dumps({"error": {"message": message, "code": 404}}).encode())
                return
            tokens = max(1, int(body.get("max_tokens") or 16))
            with state.lock:
                state.running += 1
            time.sleep(0.002 * tokens)
            text = " ".join(["w13"] * tokens)
            with state.lock:
                state.running -= 1
                state.generated += tokens
                if state.speculative is not None:
                    state.drafts += 1
                    state.drafted += tokens
                    state.accepted += tokens // 2
            choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant", "content": text},
                                       "finish_reason": "length"} if self.path == "/v1/chat/completions"
                                      else {"index": 0, "text": text, "finish_reason": "length"})
            answer = {"id": "chatcmpl-fake", "object": "chat.completion", "model": state.served, "choices": [choice],
                      "system_fingerprint": "vllm-0.32.0-FAKE",
                      "usage": {"prompt_tokens": 6, "completion_tokens": tokens, "total_tokens": 6 + tokens}}
            if body.get("stream"):  # one chunk per word, then [DONE], as an SSE body
                chunks = [{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": state.served,
                           "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]}
                          for word in text.split()]
                events = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
                self._send(200, events.encode(), "text/event-stream")
                return
            self._send(200, json.dumps(answer).encode())

    return Handler


def _option(argv: list[str], name: str, default: str | None = None) -> str | None:
    for index, word in enumerate(argv):
        if word == name and index + 1 < len(argv):
            return argv[index + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return default


def _fail(lines: list[str]) -> None:
    time.sleep(1.0)
    for line in lines:
        print(line, file=sys.stderr, flush=True)
    sys.exit(1)


def serve(argv: list[str]) -> None:
    model = argv[0] if argv and not argv[0].startswith("-") else (_option(argv, "--model") or "")
    served = _option(argv, "--served-model-name") or model
    port = int(_option(argv, "--port", "8000") or 8000)
    host = _option(argv, "--host", "0.0.0.0") or "0.0.0.0"
    print(f"(APIServer pid={os.getpid()}) INFO FAKE vLLM 0.32.0: model {model}", file=sys.stderr, flush=True)
    if not (Path(model) / "config.json").is_file():
        _fail([f"OSError: {model} does not appear to have a file named config.json."])
    utilization = float(_option(argv, "--gpu-memory-utilization", "0.92") or 0.92)
    if utilization > 0.9:
        _fail([(f"(Worker pid={os.getpid()}) ERROR ValueError: Available memory on node 0 (10.79/12.84 GiB) on "
               f"startup is less than desired CPU memory utilization ({utilization}, "
               f"{utilization * 12.84:.2f} GiB)."),
               "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"])
    spec_text = _option(argv, "--speculative-config")
    speculative = json.loads(spec_text) if spec_text else None
    time.sleep(float(os.environ.get("SPECD_FAKE_VLLM_STARTUP_S", "2")))
    server = ThreadingHTTPServer((host, port), handler_for(State(served, model, speculative)))
    print(f"(APIServer pid={os.getpid()}) INFO Starting vLLM server on http://{host}:{port}", file=sys.stderr,
          flush=True)
    server.serve_forever()


def main() -> None:
    args = sys.argv[1:]
    if args[:1] != ["serve"]:
        print("usage: vllm serve [model_tag] [options]  (FAKE: only `serve`)", file=sys.stderr)
        sys.exit(2)
    if any(a.startswith("--help") or a == "-h" for a in args[1:]):
        sys.stdout.write(HELP.read_text())
        return
    serve(args[1:])


if __name__ == "__main__":
    main()
