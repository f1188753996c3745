"""The proxy in a process of its own, under an open-files limit the test chooses (`ulimit -n`).

    python -m tests.fakes.proxy_process --backend URL --port N --nofile 128 [--max-connections M]

Prints `ready` once it accepts connections and `files SOFT HARD` (the limit after the start-up's
raise, as the daemon does it); runs until killed. The proxy is the real one (specd.proxy); only
the process around it is the test's, so a limit can be set without touching the test's own.
"""

from __future__ import annotations

import argparse
import asyncio
import resource

from specd.daemon.service import bind_tcp, new_event_loop, raise_open_files_limit
from specd.proxy.proxy import Backend, Proxy, ProxySettings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--nofile", type=int, required=True, help="the soft open-files limit")
    parser.add_argument("--hard", type=int, default=None, help="the hard limit (default: the soft one)")
    parser.add_argument("--max-connections", type=int, default=None)
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, args.hard or args.nofile))
    soft, hard = raise_open_files_limit()
    print(f"files {soft} {hard}", flush=True)
    proxy = Proxy(ProxySettings(unit="t", health_poll_s=0.05, max_connections=args.max_connections),
                  lambda: Backend(args.backend, "plain"))
    server = proxy.server(grace_s=1)

    async def run() -> None:
        task = asyncio.get_running_loop().create_task(server.serve([bind_tcp("127.0.0.1", args.port)]))
        while not server.started:
            await asyncio.sleep(0.01)
        print("ready", flush=True)
        await task

    loop = new_event_loop()
    loop.run_until_complete(run())


if __name__ == "__main__":
    main()
