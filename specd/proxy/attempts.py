"""Which server each request goes to, and who is talking to which server now.

Without routing every request goes to the primary (the serving slot). With routing on
(specd.proxy.routes) a chat or completion request may go to a companion instead; which one is
judged from its body, parsed on the event loop only when small (specd.proxy.bodies): a bigger one
is parsed on the reader's thread before it is sent, and one past the reading bounds goes to the
primary as sent.

The primary's count of attempts in progress is what a drain waits on (`wait_idle`); a companion's is
the router's, which `route off` waits on. A companion that fails an attempt is marked down and the
request goes on to the primary; the primary's own failures close its gate (the proxy's part).
"""

from __future__ import annotations

import asyncio
from typing import Any

from specd.proxy.bodies import BodyReader
from specd.proxy.http1.server import ClientRequest
from specd.proxy.routes import Routed, Router
from specd.proxy.settings import Backend
from specd.traffic.shape import read_document


class Attempts:
    def __init__(self, router: Router | None, reader: BodyReader) -> None:
        self.router = router  # None: one server, as without routing
        self._reader = reader
        self.active = 0  # attempts past the gate talking to the primary
        self._idle = asyncio.Event()
        self._idle.set()

    # ---- where a request goes -------------------------------------------------------------------

    def route_now(self, request: ClientRequest, primary: Backend, primary_open: bool) -> Routed | None:
        """The route, known at once: the primary as sent unless routing applies; None when routing must
        read a body too big to parse on the loop (`await route_off_loop`)."""
        router = self.router
        if router is None or not router.active or request.method != "POST" or not request.body:
            return Routed(None, primary.profile, request.body)
        if not self._reader.inline(request.body):
            return None
        return self._pick(request, read_document(request.body), primary, primary_open)

    async def route_off_loop(self, request: ClientRequest, primary: Backend, primary_open: bool) -> Routed:
        """The route of a request whose body is parsed on the reader's thread first."""
        return self._pick(request, await self._reader.document(request.body), primary, primary_open)

    def _pick(self, request: ClientRequest, document: dict[str, Any] | None, primary: Backend,
              primary_open: bool) -> Routed:
        assert self.router is not None
        return self.router.pick(request.target, document, request.body, primary.url, primary.profile,
                                primary_open, self.active)

    # ---- attempts in progress -------------------------------------------------------------------

    def begin(self, route: Routed) -> None:
        """An attempt begins: the primary's count (what a drain waits on), or the companion's."""
        if route.url is not None and self.router is not None:
            self.router.begin(route.url)
            return
        self.active += 1
        self._idle.clear()

    def end(self, route: Routed) -> None:
        if route.url is not None and self.router is not None:
            self.router.end(route.url)
            return
        self.active -= 1
        if self.active == 0:
            self._idle.set()

    async def wait_idle(self, timeout_s: float) -> bool:
        """Until no attempt talks to the primary (True), or `timeout_s` passed (False)."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    # ---- a companion that fails ----------------------------------------------------------------

    def companion_failed(self, route: Routed, primary_profile: str | None) -> Routed | None:
        """A companion's attempt failed: it is marked down (no new requests until its /health answers)
        and the request goes on to the primary (the route returned). None: `route` was the primary's."""
        if route.url is None or self.router is None:
            return None
        self.router.mark_down(route.url)
        return Routed(None, primary_profile, route.body, route.task_class, "drained")
