"""The proxy: the OpenAI-compatible endpoint clients talk to, and the whole request path behind it.

The request's way through: HTTP/1.1 from the client (`http1/server.py`, `http1/responder.py`), the
gate that holds requests while a switch drains or the backend is down (`gate.py`), the send on a
pooled connection to the backend (`http1/client.py`, `http1/response.py`), the re-send rule
(`resend.py`), the SSE relay (`relay.py`), what is recorded (`exchange.py`, `metrics.py`), naming
the request a backend crashed on (`crashes.py`), and the recent prompts a blue-green flip warms the
new server with (`warmup.py`), and with routing on, which resident server a request goes to
(`routes.py`, over `specd.routing`). `proxy.py` ties them together.

May import `specd.routing`, `specd.traffic`, `specd.profiles` and the base layer; never `specd.daemon` (which runs
it: the daemon's wiring, its control socket and drain) or anything above.
"""
