"""The proxy in front of the real llama-server, frozen with SIGSTOP mid-stream (system tier: it
needs the real binary and the tiny model)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from specd.proxy.proxy import Backend, Proxy, ProxySettings
from specd.traffic.records import Recorder
from tests.conftest import LLAMA_SERVER, TINY_MODEL, require_real_server
from tests.fakes.proxy_fakes import ServerThread, eventually, free_port


@pytest.mark.llama
def test_a_stopped_llama_server_ends_the_stream_and_serves_again_after_it_resumes(tmp_path: Path) -> None:
    """The real llama-server frozen with SIGSTOP mid-stream (its socket stays open, nothing comes)."""
    require_real_server()
    port = free_port()
    server = subprocess.Popen([str(LLAMA_SERVER), "-m", str(TINY_MODEL), "--host", "127.0.0.1", "--port", str(port),
                               "-c", "4096", "-np", "1", "-t", "2", "--alias", "tiny"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    recorder = Recorder(tmp_path / "state.db")
    proxy = Proxy(ProxySettings(health_poll_s=0.05, stream_idle_timeout_s=1.5),
                  lambda: Backend(f"http://127.0.0.1:{port}", "real"), recorder=recorder)
    front = ServerThread(proxy, free_port()).start()
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Count from one to ten thousand."}],
            "max_tokens": 3000, "temperature": 0, "stream": True, "ignore_eos": True}
    try:
        with httpx.Client(timeout=120) as client:
            assert client.post(f"{front.url}/v1/chat/completions",  # the proxy holds until it has loaded
                               json={**body, "stream": False, "max_tokens": 2}).status_code == 200
            with client.stream("POST", f"{front.url}/v1/chat/completions", json=body) as response:
                text = ""
                for chunk in response.iter_text():
                    if not text:
                        server.send_signal(signal.SIGSTOP)
                    text += chunk
            assert text.endswith("\n\n")
            last = json.loads(text.strip().split("\n\n")[-1][6:])
            assert last["error"]["code"] == 504
            server.send_signal(signal.SIGCONT)
            eventually(lambda: proxy.active == 0, "the proxy to let go of the backend")
            # the frozen request's slot is freed (the proxy hung up), so llama-server's only slot serves again
            slots = f"http://127.0.0.1:{port}/slots"
            eventually(lambda: not any(s["is_processing"] for s in httpx.get(slots, timeout=5).json()),
                       "llama-server to drop the abandoned generation", timeout_s=30)
            again = client.post(f"{front.url}/v1/chat/completions", json={**body, "stream": False, "max_tokens": 4})
            assert again.status_code == 200 and again.json()["choices"][0]["message"]["content"] is not None
    finally:
        server.send_signal(signal.SIGCONT)
        front.stop()
        recorder.close()
        server.terminate()
        server.wait(20)
