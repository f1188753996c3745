"""Which server holds a conversation's prefix in its prompt cache, as far as the proxy can tell.

llama-server keeps a slot's prompt cache until the slot serves something else, so a follow-up turn
on the same server skips re-reading the conversation so far; on another server it pays the whole
prefill again. The proxy cannot see the cache, so it remembers where each conversation went last
(keyed by the hash of its opening, specd.traffic.shape.conversation_of) and for how long such a
cache is worth following (`ttl_s`): after that, or once that server left the set, the request is
routed afresh. Bounded: the least recently seen conversations are forgotten first.
"""

from __future__ import annotations

from collections import OrderedDict

DEFAULT_TTL_S = 600.0
DEFAULT_CAPACITY = 4096


class Affinity:
    def __init__(self, ttl_s: float = DEFAULT_TTL_S, capacity: int = DEFAULT_CAPACITY) -> None:
        self.ttl_s = ttl_s
        self.capacity = capacity
        self._seen: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def server_of(self, conversation: str | None, now: float) -> str | None:
        """The server the conversation's last turn went to, while its cache is worth following."""
        if conversation is None:
            return None
        found = self._seen.get(conversation)
        if found is None:
            return None
        server, at = found
        if now - at > self.ttl_s:
            del self._seen[conversation]
            return None
        return server

    def note(self, conversation: str | None, server: str, now: float) -> None:
        if conversation is None or self.ttl_s <= 0:
            return
        self._seen[conversation] = (server, now)
        self._seen.move_to_end(conversation)
        while len(self._seen) > self.capacity:
            self._seen.popitem(last=False)

    def forget_server(self, server: str) -> None:
        """The server stopped or restarted: whatever it cached is gone."""
        for key in [k for k, (s, _) in self._seen.items() if s == server]:
            del self._seen[key]

    def __len__(self) -> int:
        return len(self._seen)
