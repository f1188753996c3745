"""scripts/build-llama-server.sh as `specd quickstart` runs it, piped (not a terminal): the sdist's
download says how far it is every 10% (it sat on one line for 100 s), a wrong checksum keeps
nothing, and the build says what to expect on this box and then the time left at its own pace.

The package index is a FAKE (a local HTTP server serving a small made-up sdist in PyPI's JSON
form), and so is cmake (a script on the PATH printing cmake's "[ 40%]" lines): a test may not
download 77 MB from PyPI or spend minutes compiling llama.cpp.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build-llama-server.sh"
VERSION = "9.9.9"
NAME = f"llama_cpp_python-{VERSION}.tar.gz"
FAKE_CMAKE = """#!/bin/bash
# FAKE cmake: configure does nothing; --build prints cmake's progress lines and leaves a binary.
if [ "$1" = --build ]; then
  for pct in 5 12 23 31 47 52 68 74 88 96 100; do echo "[ $pct%] Building CXX object x.o"; done
  mkdir -p "$2/bin"; printf '#!/bin/bash\\necho version: 1\\n' >"$2/bin/llama-server"; chmod +x "$2/bin/llama-server"
fi
"""


def sdist() -> bytes:
    """A made-up sdist: llama.cpp's CMakeLists.txt where the real one has it, and 2 MB that do not compress."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in (("CMakeLists.txt", b"project(fake)\n"), ("noise.bin", os.urandom(2_000_000))):
            info = tarfile.TarInfo(f"llama_cpp_python-{VERSION}/vendor/llama.cpp/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def index() -> Iterator[tuple[str, dict[str, bytes]]]:
    """A FAKE package index: /simple/llama-cpp-python/ in PEP 691 JSON, and the file it lists."""
    content = {"file": sdist()}
    content["sha256"] = hashlib.sha256(content["file"]).hexdigest().encode()

    class Index(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/simple/llama-cpp-python/":
                body = json.dumps({"files": [{"filename": NAME, "url": f"/files/{NAME}",
                                              "hashes": {"sha256": content["sha256"].decode()}}]}).encode()
                kind = "application/vnd.pypi.simple.v1+json"
            elif self.path == f"/files/{NAME}":
                body, kind = content["file"], "application/octet-stream"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple", content
    finally:
        server.shutdown()
        server.server_close()


def build(tmp_path: Path, index_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir(exist_ok=True)
    (fake_bin / "cmake").write_text(FAKE_CMAKE)
    (fake_bin / "cmake").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}", "SPECD_CACHE": str(tmp_path / "cache"),
           "PIP_INDEX_URL": index_url, "LLAMA_CPP_PYTHON_VERSION": VERSION}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def test_the_download_reports_progress_and_the_build_what_to_expect_and_the_time_left(
        tmp_path: Path, index: tuple[str, dict[str, bytes]]) -> None:
    result = build(tmp_path, index[0])
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    downloading = [line for line in lines if "downloading: " in line]
    assert len(downloading) >= 5 and downloading[-1].startswith("build-llama-server: downloading: 100% of 2 MB")
    assert f"downloaded {NAME} (sha256 checked)" in result.stderr
    expect = next(line for line in lines if "building llama-server with" in line)
    assert f"here {os.cpu_count() and len(os.sched_getaffinity(0))} cores, load average" in expect, expect
    assert "expect about" in expect and "min" in expect, expect
    building = [line for line in lines if re.match(r"build-llama-server: building +\d+%", line)]
    assert len(building) >= 9 and all(" in" in line for line in building), building  # every 10%, with the time
    assert any("left at this pace" in line for line in building), building
    assert result.stdout.strip().endswith("build/bin/llama-server")


def test_a_download_whose_checksum_differs_keeps_nothing(tmp_path: Path, index: tuple[str, dict[str, bytes]]) -> None:
    index[1]["sha256"] = b"0" * 64
    result = build(tmp_path, index[0], "--fetch-only")
    assert result.returncode == 1 and "the index says 0000" in result.stderr, result.stderr
    assert list((tmp_path / "cache" / "sdist").iterdir()) == []  # neither the file nor its .part


def test_fetch_only_unpacks_the_sources_and_builds_nothing(tmp_path: Path, index: tuple[str, dict[str, bytes]]) -> None:
    result = build(tmp_path, index[0], "--fetch-only")
    assert result.returncode == 0, result.stderr
    source = Path(result.stdout.strip().splitlines()[-1])
    assert (source / "CMakeLists.txt").read_text() == "project(fake)\n"
    assert "building" not in result.stderr
