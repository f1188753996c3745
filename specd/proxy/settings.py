"""What the proxy is told: where the serving profile's server listens, and its own settings."""

from __future__ import annotations

from dataclasses import dataclass

from specd.profiles.config import DEFAULT_HOLD_TIMEOUT_S


@dataclass(frozen=True)
class Backend:
    """Where the active profile's llama-server listens, and which profile that is."""

    url: str
    profile: str | None = None
    api_key: str | None = None  # the server's own key (a warm-up sends it; clients send theirs)


@dataclass(frozen=True)
class ProxySettings:
    hold_timeout_s: float = DEFAULT_HOLD_TIMEOUT_S
    max_body_bytes: int = 64 * 1024 * 1024
    health_poll_s: float = 0.1
    unit: str = ""
    # A streamed response that sends nothing for this long is ended with an error event (a hung
    # backend); generous, because a long prompt's prefill is silent too.
    stream_idle_timeout_s: float = 300.0
    body_timeout_s: float = 60.0  # a client must send its whole request body within this
    header_timeout_s: float = 30.0  # ... and a request's headers within this (slowloris)
    max_connections: int | None = None  # open client connections at most (None: what the open-files limit allows)
