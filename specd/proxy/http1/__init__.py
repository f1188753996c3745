"""HTTP/1.1 as the proxy speaks it, on asyncio protocols with httptools (llhttp) parsing.

`server` and `responder`: the connections clients make, each whole request handed to a handler,
each answer written back; `listener`: the listening socket, its cap on connections and the sweep
of their deadlines. `client` and `response`: pooled keep-alive connections to the backend,
each response's body handed part by part to a sink. Nothing here knows llama-server, the gate or
what is recorded: specd.proxy.proxy and specd.proxy.relay do. It exists because every request
pays for it: uvicorn with an ASGI app and aiohttp's client added about 0.5 ms to every first token
on this project's box, this about 0.1 ms (benchmarks/results/proxy-overhead.md).
"""

Headers = list[tuple[bytes, bytes]]  # (name, value) as on the wire; names lowercased where parsed here
