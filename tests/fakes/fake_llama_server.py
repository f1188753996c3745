"""FAKE llama-server for failure cases a real server cannot produce on demand.

Modes (`--fake-mode`): ok, exit-at-start, never-healthy, wrong-alias, die-after-healthy (after
--fake-seconds), hang-completion, abort-on-marker (a POST whose body holds ABORT_MARKER aborts the
whole process with SIGABRT after reading it, as a GGML_ASSERT does in the real server: the
connection drops after the server accepted the request), speculates (answers carry llama-server's
`timings`, with `draft_n`/`draft_n_accepted` whenever a speculator is on), never-drafts (the same
timings, but no draft ever: a speculator the binary accepts and never runs, as `--spec-type ngram-*`
on a hybrid target in one fork). `--fake-spec-default-on` (put in front by a wrapper script, so its
--help says it too) makes it a build with speculation on by default: `ngram-mod` runs unless
`--no-spec-type ngram-mod` removes it, and `--spec-type` adds to it. `--fake-log PATH` appends one line per
start (`start PID`) and per request served or aborted on (`request SHA256-OF-BODY`), so a test can
count restarts and see that each request reached the server exactly once. In every mode a POST
whose body holds ANSWER_500_MARKER is answered 500, and one holding GARBAGE_MARKER gets 200 with a
body that is not JSON (GARBAGE): backend faults the real server shows only by accident. Accepts the llama-server
flags specd renders and prints its --help in llama-server's layout so specd's flag check treats it
like the real thing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ABORT_MARKER = b"FAKE-ABORT-ON-THIS-REQUEST"
ANSWER_500_MARKER = b"FAKE-ANSWER-500"
GARBAGE_MARKER = b"FAKE-ANSWER-GARBAGE"
GARBAGE = b'{"choices": [{"message": {"content": "cut he'

HELP = """----- common params -----

-h,    --help, --usage                  print usage and exit
--version                               show version and build info
-t,    --threads N                      number of CPU threads
-c,    --ctx-size N                     size of the prompt context
-np,   --parallel N                     number of server slots
-m,    --model FNAME                    model path to load
--alias STRING                          model alias
--host HOST                             ip address to listen
--port PORT                             port to listen
--metrics                               enable prometheus compatible metrics endpoint
--jinja                                 use jinja template
@SPEC_TYPE@--spec-draft-n-max N                    number of tokens to draft
--fake-mode MODE                        FAKE: which failure to produce
--fake-seconds S                        FAKE: seconds before die-after-healthy dies
--fake-log PATH                         FAKE: append starts and requests seen to PATH
--fake-spec-default-on                  FAKE: a build that speculates (ngram-mod) unless told not to
"""
SPEC_TYPE_OFF = """--spec-type none,draft-simple,draft-mtp,ngram-simple,ngram-mod
                                        comma-separated list of types of speculative decoding to use (default:
                                        none)
"""
SPEC_TYPE_ON = """--spec-type none,draft-simple,draft-mtp,ngram-simple,ngram-mod
                                        comma-separated list of types of speculative decoding to add to the
                                        default config (default: ngram-mod)
--no-spec-type TYPE                     comma-separated list of speculative types to remove from the config
"""
DEFAULT_ON = ("ngram-mod",)
DRAFTED_PER_TOKEN = 0.5  # FAKE speculates: draft_n = half the tokens predicted, 3 in 4 accepted


def speculators(args: argparse.Namespace) -> set[str]:
    """The speculative types this FAKE server runs with: the build's default, plus --spec-type, minus --no-spec-type."""
    running = set(DEFAULT_ON) if args.fake_spec_default_on else set()
    running |= {t for t in (args.spec_type or "").split(",") if t}
    running -= {t for t in (args.no_spec_type or "").split(",") if t}
    return running - {"none"}


def completion(body: bytes, drafting: bool) -> dict[str, object]:
    """An answer with llama-server's timings: as many tokens as asked for (up to 32), drafts when drafting."""
    try:
        asked = int(json.loads(body).get("max_tokens") or 16)
    except (ValueError, AttributeError):
        asked = 16
    tokens = max(1, min(asked, 32))
    timings: dict[str, object] = {"prompt_n": 3, "prompt_ms": 1.0, "predicted_n": tokens, "predicted_ms": 2.0 * tokens}
    if drafting:
        timings.update(draft_n=int(tokens * DRAFTED_PER_TOKEN), draft_n_accepted=int(tokens * DRAFTED_PER_TOKEN * 0.75))
    return {"choices": [{"message": {"role": "assistant", "content": " ".join(["OK"] * tokens)}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": tokens}, "timings": timings}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(add_help=False)
    for flag in ("--threads", "-t", "--ctx-size", "-c", "--parallel", "-np", "--model", "-m", "--alias", "--host",
                 "--spec-type", "--no-spec-type", "--spec-draft-n-max", "--fake-mode", "--fake-log"):
        parser.add_argument(flag)
    parser.add_argument("--fake-spec-default-on", action="store_true")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--fake-seconds", type=float, default=3.0)
    parser.add_argument("--metrics", action="store_true")
    parser.add_argument("--jinja", action="store_true")
    parser.add_argument("--help", "-h", action="store_true")
    parser.add_argument("--version", action="store_true")
    return parser.parse_args(argv)


def main() -> None:  # noqa: C901 - predates the complexity gate; split when next changed
    args = parse(sys.argv[1:])
    if args.help:
        print(HELP.replace("@SPEC_TYPE@", SPEC_TYPE_ON if args.fake_spec_default_on else SPEC_TYPE_OFF))
        return
    if args.version:
        print("version: 0 (FAKE llama-server for tests)")
        return
    mode = args.fake_mode or "ok"
    if mode == "exit-at-start":
        print("FAKE: exiting at start as asked", file=sys.stderr)
        sys.exit(1)
    alias = "not-" + (args.alias or "x") if mode == "wrong-alias" else args.alias

    def note(line: str) -> None:
        if args.fake_log:  # one write per line on an O_APPEND descriptor: whole lines from threads
            fd = os.open(args.fake_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, f"{line}\n".encode())
            finally:
                os.close(fd)

    note(f"start {os.getpid()}")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            return

        def _json(self, status: int, payload: object) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/health":
                if mode == "never-healthy":
                    self._json(503, {"error": {"message": "Loading model", "code": 503}})
                else:
                    self._json(200, {"status": "ok"})
            elif self.path == "/v1/models":
                self._json(200, {"data": [{"id": alias, "aliases": [alias]}]})
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = self.rfile.read(length)
            note(f"request {hashlib.sha256(body).hexdigest()}")
            if mode == "abort-on-marker" and ABORT_MARKER in body:
                print("FAKE: GGML_ASSERT-like abort on a marked request", file=sys.stderr, flush=True)
                os.abort()
            if ANSWER_500_MARKER in body:
                self._json(500, {"error": {"code": 500, "message": "FAKE: internal error", "type": "server_error"}})
                return
            if GARBAGE_MARKER in body:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(GARBAGE)))
                self.end_headers()
                self.wfile.write(GARBAGE)
                return
            if mode == "hang-completion":
                time.sleep(3600)
            if mode in ("speculates", "never-drafts"):
                self._json(200, completion(body, drafting=mode == "speculates" and bool(speculators(args))))
                return
            self._json(200, {"choices": [{"message": {"role": "assistant", "content": "OK"}}],
                             "usage": {"prompt_tokens": 3, "completion_tokens": 1}})

    class Server(ThreadingHTTPServer):
        request_queue_size = 1024  # llama-server's listen backlog is large too; 5 would drop connects

    server = Server((args.host or "127.0.0.1", args.port), Handler)
    if mode == "die-after-healthy":
        def die() -> None:
            time.sleep(args.fake_seconds)
            os._exit(3)

        threading.Thread(target=die, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
