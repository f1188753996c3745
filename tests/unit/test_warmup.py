"""The warm-up before a blue-green flip: which recent requests are replayed, how (one token, not
streamed, the server's key), all at once, and never longer than the budget. The new server is
httpx's MockTransport here; the real llama-server's cache after a real switch is
tests/system/test_bluegreen.py's."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from specd.proxy.warmup import MAX_BODY_BYTES, Recent, RecentRequests, distinct, one_token, warm_up
from specd.traffic.shape import read_shape


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": text}], **extra}


def note(recent: RecentRequests, path: str, body: bytes | dict[str, Any]) -> None:
    """What the proxy does with each request: its body as sent, and the shape read from it."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    recent.note(path, read_shape(raw), raw)


def test_the_newest_request_of_each_distinct_prompt_is_kept_newest_first() -> None:
    recent = RecentRequests()
    note(recent, "/v1/chat/completions", chat("a", temperature=0))
    note(recent, "/v1/chat/completions", chat("b"))
    note(recent, "/v1/chat/completions", chat("a", temperature=1))  # the same prompt again: the newer wins
    note(recent, "/v1/completions", {"model": "tiny", "prompt": "def f():"})
    chosen = [document for _, document in distinct(recent.newest())]
    assert [(d.get("temperature"), d.get("prompt")) for d in chosen] == [(None, "def f():"), (1, None), (None, None)]
    assert [d["messages"][0]["content"] for d in chosen[1:]] == ["a", "b"]
    assert [r.path for r, _ in distinct(recent.newest())] == ["/v1/completions", *["/v1/chat/completions"] * 2]


def test_a_request_without_a_readable_prompt_does_not_hide_older_ones() -> None:
    older = Recent("/v1/chat/completions", json.dumps(chat("older")).encode())
    no_prompt = Recent("/v1/completions", json.dumps({"model": "tiny", "input": "no prompt key"}).encode())
    too_deep = Recent("/v1/completions", b'{"model": "tiny", "prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}")
    chosen = distinct([too_deep, no_prompt, older])  # newest first; too deep to compare: skipped, not an error
    assert [document["messages"][0]["content"] for _, document in chosen] == ["older"]


def test_only_generation_requests_of_a_bounded_size_are_remembered() -> None:
    recent = RecentRequests(keep=3)
    note(recent, "/v1/embeddings", {"input": "x", "prompt": "x"})  # not a generation
    note(recent, "/v1/completions", b"not JSON")
    note(recent, "/v1/completions", b"[" * 5000 + b"]" * 5000)  # JSON, no object, too deep to read
    note(recent, "/v1/completions", {"prompt": "big", "x": "x" * MAX_BODY_BYTES})
    assert recent.newest() == []
    for n in range(5):
        note(recent, "/v1/completions", {"prompt": str(n)})
    assert [json.loads(r.body)["prompt"] for r in recent.newest()] == ["4", "3", "2"]  # the last `keep` only
    assert len(distinct(recent.newest(), limit=2)) == 2 and distinct([]) == []


def test_the_bodies_remembered_are_bounded_in_bytes_too() -> None:
    recent = RecentRequests(kept_bytes=3 * 1024)
    for n in range(6):
        note(recent, "/v1/completions", {"prompt": f"{n}" + "x" * 1400})
    assert [json.loads(r.body)["prompt"][0] for r in recent.newest()] == ["5", "4"]  # two of ~1.4 KB fit in 3 KB


def test_a_warm_up_request_is_the_same_prompt_for_one_token_not_streamed() -> None:
    original = chat("hi", stream=True, stream_options={"include_usage": True}, max_completion_tokens=500,
                    temperature=0.2, tools=[{"type": "function"}])
    warm = one_token(original)
    assert warm == {"model": "tiny", "messages": original["messages"], "temperature": 0.2,
                    "tools": [{"type": "function"}], "stream": False, "max_tokens": 1, "n_predict": 1}
    assert original["stream"] is True  # the remembered request is not changed


def test_every_prompt_is_sent_at_once_with_the_servers_key() -> None:
    seen: list[tuple[str, dict[str, Any], str | None]] = []
    concurrent = {"now": 0, "most": 0}

    async def handler(request: httpx.Request) -> httpx.Response:
        concurrent["now"] += 1
        concurrent["most"] = max(concurrent["most"], concurrent["now"])
        await asyncio.sleep(0.05)
        concurrent["now"] -= 1
        seen.append((request.url.path, json.loads(request.content), request.headers.get("authorization")))
        return httpx.Response(200, json={"choices": []})

    requests = [Recent("/v1/completions", json.dumps({"prompt": str(n), "stream": True}).encode()) for n in range(4)]
    warmed = asyncio.run(warm_up("http://new-server", requests, api_key="k3y", transport=httpx.MockTransport(handler)))
    assert (warmed.sent, warmed.answered) == (4, 4) and concurrent["most"] == 4
    assert sorted(doc["prompt"] for _, doc, _ in seen) == ["0", "1", "2", "3"]
    assert all(path == "/v1/completions" and doc["stream"] is False and doc["max_tokens"] == 1 and key == "Bearer k3y"
               for path, doc, key in seen)
    assert "warmed the new server's prompt cache with 4 of 4 recent prompt(s)" in warmed.describe()


def test_a_server_that_does_not_answer_in_time_delays_the_flip_by_the_budget_only() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["prompt"] == "fails":
            return httpx.Response(500)
        if json.loads(request.content)["prompt"] == "hangs":
            await asyncio.sleep(30)
        return httpx.Response(200, json={})

    requests = [Recent("/v1/completions", json.dumps({"prompt": p}).encode()) for p in ("hangs", "fails", "fine")]
    started = time.monotonic()
    warmed = asyncio.run(warm_up("http://new-server", requests, budget_s=0.3, transport=httpx.MockTransport(handler)))
    assert time.monotonic() - started < 5
    assert (warmed.sent, warmed.answered) == (3, 1)
    assert asyncio.run(warm_up("http://new-server", [])).describe().startswith("no recent request")


def test_a_warm_up_without_a_key_sends_none_and_a_request_that_errors_is_not_counted_answered() -> None:
    keys: list[str | None] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        keys.append(request.headers.get("authorization"))
        if json.loads(request.content)["prompt"] == "refused":
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={})

    requests = [Recent("/v1/completions", json.dumps({"prompt": p}).encode()) for p in ("refused", "fine")]
    warmed = asyncio.run(warm_up("http://new-server", requests, transport=httpx.MockTransport(handler)))
    assert (warmed.sent, warmed.answered) == (2, 1)
    assert keys == [None, None]
    assert 0.0 <= warmed.seconds < 5.0 and "1 of 2 recent prompt(s) in" in warmed.describe()
