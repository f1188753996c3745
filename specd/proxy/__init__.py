"""The proxy: the OpenAI-compatible endpoint clients talk to, and the whole request path behind it.

The request's way through: HTTP/1.1 from the client (`http1/server.py`, `http1/responder.py`; the
listening socket and its cap on connections, `http1/listener.py`), the gate that holds requests
while a switch drains or the backend is down (`gate.py`), with routing on which resident server a
request goes to (`attempts.py`, `routes.py`, over `specd.routing`), the send on a pooled connection
to the backend (`http1/client.py`, `http1/response.py`), the re-send rule (`resend.py`), the SSE
relay (`relay.py`), what is recorded (`exchange.py`, `metrics.py`), naming the request a backend
crashed on (`crashes.py`), and the recent prompts a blue-green flip warms the new server with
(`warmup.py`). `proxy.py` ties them together; what it is told, `settings.py`.

May import `specd.routing`, `specd.traffic`, `specd.profiles` and the base layer; never `specd.daemon` (which runs
it: the daemon's wiring, its control socket and drain) or anything above.
"""
