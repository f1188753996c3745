"""A llama-server on a Unix socket (`--host /path/x.sock`, no port), through the real private systemd
and the real llama-server with the tiny model: a hand-written unit of that shape (the one in
tests/corpus/units/AvaronInc--core--llama-server.service) runs; `specd import` makes a profile of it;
`specd switch` by restart, gated over the socket, to it and then to another profile on the same socket
(whose unit specd renders itself: the stale socket is removed before each start); a blue-green switch is
refused naming the socket, changing nothing; so is a rollback to it while the deployment has a
[proxy]; `specd rollback` goes back; clients, who connect to the
socket, see the same id throughout."""

from __future__ import annotations

import json
import os
import subprocess
import time
import tomllib
from pathlib import Path

import httpx
import pytest

from specd.setup.sandbox import free_port
from specd.unit.render import profile_of_unit
from specd.unit.syntax import split_words
from tests.conftest import LLAMA_SERVER, TINY_MODEL, Box

pytestmark = [pytest.mark.systemd, pytest.mark.llama, pytest.mark.usefixtures("real_server")]


def listed_over(socket: Path) -> list[str]:
    """/v1/models' ids as a client of the socket sees them."""
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket)), timeout=10) as client:
        return [str(entry["id"]) for entry in client.get("http://localhost/v1/models").json()["data"]]


def wait_listed(socket: Path, deadline_s: float = 120) -> list[str]:
    end = time.monotonic() + deadline_s
    while True:
        try:
            return listed_over(socket)
        except (httpx.HTTPError, ValueError, KeyError):
            if time.monotonic() > end:
                raise
            time.sleep(0.5)


def main_pid(box: Box) -> str:
    return subprocess.run(["systemctl", "--user", "show", "-p", "MainPID", "--value", box.unit], env=box.env,
                          capture_output=True, text=True, check=True).stdout.strip()


def test_a_unit_on_a_unix_socket_imports_switches_by_restart_refuses_blue_green_and_rolls_back(box: Box) -> None:
    socket = Path(box.manager.env["XDG_RUNTIME_DIR"]) / f"{box.unit.removesuffix('.service')}.sock"
    box.unit_path.parent.mkdir(parents=True, exist_ok=True)
    box.unit_path.write_text(f"[Unit]\nDescription=Llama Server\n[Service]\nType=simple\n"
                             f"ExecStart={LLAMA_SERVER} --model {TINY_MODEL} --host {socket} -t 1 -c 512\n"
                             f"ExecStartPre=/bin/rm -f {socket}\nRestart=on-failure\n")
    subprocess.run(["systemctl", "--user", "daemon-reload"], env=box.env, check=True)
    subprocess.run(["systemctl", "--user", "start", box.unit], env=box.env, check=True)
    before = wait_listed(socket)
    assert before == [str(TINY_MODEL)]  # with no --alias llama-server serves the model path as given

    imported = box.specd("import", "sock", "--from", str(box.unit_path), "--json")
    assert imported.returncode == 0, imported.stdout + imported.stderr
    profile = tomllib.loads((box.profiles_dir / "sock.toml").read_text())
    assert profile["host"] == str(socket) and "port" not in profile
    box.edit_profile("sock", health_timeout_s=60, stability_s=1)
    shown = box.specd("show", "sock", check=True).stdout
    assert str(socket) in shown and "--port" not in shown
    switched = box.specd("switch", "sock", "--strategy", "restart")
    assert switched.returncode == 0, switched.stdout + switched.stderr
    exec_start = next(line for line in box.unit_path.read_text().splitlines() if line.startswith("ExecStart="))
    assert f'"--host" "{socket}"' in exec_start or f"--host {socket}" in exec_start
    assert "--port" not in exec_start and "--alias" not in exec_start
    assert listed_over(socket) == before  # clients of the socket see what they saw

    box.write_profile("sock-ngram", f'binary = "{LLAMA_SERVER}"\nmodel = "{TINY_MODEL}"\nalias = "{TINY_MODEL}"\n'
                                    f'implicit = ["alias"]\nhost = "{socket}"\nthreads = 1\nctx_size = 512\n'
                                    "health_timeout_s = 60\nstability_s = 1\n[speculative]\ntype = \"ngram-simple\"\n")
    switched = box.specd("switch", "sock-ngram", "--strategy", "restart")
    assert switched.returncode == 0, switched.stdout + switched.stderr  # the gate passed over the socket
    assert profile_of_unit(box.unit_path.read_text()) == "sock-ngram"
    clears = [line for line in box.unit_path.read_text().splitlines() if line.startswith("ExecStartPre=")]
    # llama-server left its socket behind and cannot bind over it: specd's render removes it before each start.
    assert [split_words(line.split("=", 1)[1], "unit") for line in clears] == [["/bin/rm", "-f", "--", str(socket)]]
    status = json.loads(box.specd("status", "--json", check=True).stdout)
    assert (status["healthy"], status["endpoint"]) == (True, f"unix:{socket}")
    assert listed_over(socket) == before

    unit_before, pid_before = box.unit_path.read_text(), main_pid(box)
    refused = box.specd("switch", "sock", "--strategy", "blue-green")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"the server listens on the Unix socket {socket}" in refused.stderr
    assert "nothing was changed" in refused.stderr and "Traceback" not in refused.stderr
    assert (box.unit_path.read_text(), main_pid(box)) == (unit_before, pid_before)
    assert not (box.manager.unit_dir / box.green_unit).exists()

    # With a [proxy] (which forwards to a TCP port) a rollback to the socket generation is refused up front.
    config = box.config_path.read_text()
    box.config_path.write_text(config + f'\n[proxy]\nlisten = "127.0.0.1:{free_port()}"\n')
    refused = box.specd("rollback")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"listens on the Unix socket {socket}" in refused.stderr and "[proxy]" in refused.stderr
    assert "nothing was changed" in refused.stderr and "Traceback" not in refused.stderr
    assert (box.unit_path.read_text(), main_pid(box)) == (unit_before, pid_before)
    box.config_path.write_text(config)

    rolled = box.specd("rollback")
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    assert profile_of_unit(box.unit_path.read_text()) == "sock"
    assert listed_over(socket) == before
    assert os.path.exists(socket)
