"""Does this server honour per-request draft settings? Ask it, and read what it drafted.

Two text completions (`/v1/completions`) to a speculative server, the same prompt, greedy: one as it
is, one with `speculative.n_max = 0` and `speculative.n_min = 0`. The prompt is code followed by the
start of a copy of it, so any model continues the copy and every kind of drafter drafts: n-gram
lookup (which drafts only from a long match in the context), a draft model, MTP heads. A text
completion needs no chat template: a chat request ("repeat this code") was answered with chat-markup
filler by the tiny Gemma 3 on these boxes, and n-gram lookup drafted nothing on it.
`timings.draft_n` says what each drafted.
Drafting on the first and not on the second: the engine honours per-request settings, and one
server can serve every class with its own (specd.routing.stamp). Drafting on both: it ignores them
(the pinned llama-server: `server-schema.cpp` compiles them out, "we disable speculative parameter
adjustments for now"), so routing needs two servers. Nothing drafted on the first: it cannot be
told (the server does not speculate). A 4xx on the second: the engine refuses the fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import httpx

Verdict = Literal["honoured", "ignored", "refused", "unknown"]
OFF = {"speculative.n_max": 0, "speculative.n_min": 0}
_TEXT = "\n".join(f"def step_{i}(value):\n    total = value * {i} + {i * 7}\n    return total - {i}\n"
                  for i in range(1, 7))
PROMPT = f"Python code:\n\n{_TEXT}\nThe same code, copied exactly:\n\n{_TEXT[:len(_TEXT) // 3]}"
MAX_TOKENS = 64


@dataclass(frozen=True)
class ProbeResult:
    verdict: Verdict
    detail: str
    draft_n: int | None = None  # drafted on the request as it is
    draft_n_off: int | None = None  # drafted on the request that asked for no drafting

    @property
    def honoured(self) -> bool:
        return self.verdict == "honoured"

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def judge(draft_n: int | None, draft_n_off: int | None, off_status: int = 200, off_error: str = "") -> ProbeResult:
    """The verdict from what the two requests drafted (None: the answer carried no draft_n)."""
    if 400 <= off_status < 500:
        return ProbeResult("refused", f"the server refused a request with per-request speculative fields "
                                      f"(HTTP {off_status}: {off_error[:200]})", draft_n, None)
    if not draft_n:
        return ProbeResult("unknown", "the server drafted nothing on the probe without per-request settings, so "
                                      "whether it honours them cannot be told (does the profile speculate?)",
                           draft_n, draft_n_off)
    if not draft_n_off:
        return ProbeResult("honoured", f"drafted {draft_n} tokens as configured and none with "
                                       "speculative.n_max = 0: per-request draft settings work", draft_n, draft_n_off)
    return ProbeResult("ignored", f"drafted {draft_n_off} tokens on a request that set speculative.n_max = 0 "
                                  f"({draft_n} without it): this build ignores per-request draft settings "
                                  "(compiled out in the pinned llama-server), so routing runs two servers",
                       draft_n, draft_n_off)


def _body(alias: str | None, extra: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt": PROMPT, "max_tokens": MAX_TOKENS,
                            "temperature": 0.0, "seed": 1, "cache_prompt": False, **extra}
    if alias:
        body["model"] = alias
    return body


def _draft_n(payload: Any) -> int | None:
    timings = payload.get("timings") if isinstance(payload, dict) else None
    value = timings.get("draft_n") if isinstance(timings, dict) else None
    return int(value) if isinstance(value, int | float) else None


def probe(client: httpx.Client, base_url: str, alias: str | None, api_key: str | None = None) -> ProbeResult:
    """Ask the server at `base_url` (it must answer; errors other than a refusal propagate as httpx's)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    url = f"{base_url}/v1/completions"
    plain = client.post(url, json=_body(alias, {}), headers=headers)
    plain.raise_for_status()
    off = client.post(url, json=_body(alias, dict(OFF)), headers=headers)
    if 400 <= off.status_code < 500:
        return judge(_draft_n(plain.json()), None, off.status_code, off.text)
    off.raise_for_status()
    return judge(_draft_n(plain.json()), _draft_n(off.json()))
