"""Where a server listens (specd.endpoint): a TCP host and port, or a Unix socket as llama-server takes
one (a --host ending in .sock). What a user relies on: a profile or unit on a socket is reached over that
socket by the gate and status (a real HTTP server on a real socket here), and every part that needs a
TCP port (blue-green's second server, routing, the bench, the proxy) refuses it by name, changing nothing."""

from __future__ import annotations

import http.server
import re
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from specd.daemon.steering import NO_BACKEND, backend_of
from specd.deploy.preflight import check_socket, quick_problems
from specd.deploy.slots import port_of, same_but_port
from specd.endpoint import Endpoint, http_client, is_socket_host, shown, socket_of, tcp_port
from specd.errors import ConfigError, PreflightError, ProfileError, UsageError
from specd.profiles.load import load_profile
from specd.unit.parse import parse_unit
from specd.unit.render import exec_start_line, render_unit
from tests.fakes.switch_world import UNIT, World, make_world


def test_a_socket_is_an_absolute_path_ending_in_sock_as_llama_server_reads_its_host() -> None:
    assert is_socket_host("/run/user/1000/llama.sock")
    assert not is_socket_host("127.0.0.1") and not is_socket_host("llama.sock") and not is_socket_host("/run/x")
    socket = Endpoint("/run/Models A/Llama.sock")
    assert socket.socket == "/run/Models A/Llama.sock" and socket.port is None
    # The path survives the base URL whole (case, spaces), and a request path appended stays apart from it.
    assert socket_of(socket.base_url + "/v1/models?x=1") == "/run/Models A/Llama.sock"
    assert shown(socket.base_url) == socket.shown == "unix:/run/Models A/Llama.sock"
    assert Endpoint("127.0.0.1", 8080).base_url == "http://127.0.0.1:8080"
    assert Endpoint("::1", 8080).base_url == "http://[::1]:8080"
    assert socket_of("http://127.0.0.1:8080") is None


def test_a_part_that_needs_a_port_refuses_a_socket_naming_it() -> None:
    assert tcp_port("http://127.0.0.1:8081", "routing") == 8081
    with pytest.raises(UsageError, match=r"listens on the Unix socket /run/l.sock; routing needs a TCP port") as caught:
        tcp_port(Endpoint("/run/l.sock").base_url, "routing")
    assert "--strategy restart" in (caught.value.hint or "")


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"{self.path} {self.headers['Host']}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def socket_server(tmp_path: Path) -> Iterator[str]:
    """A real HTTP server on a real Unix socket, answering with the path and Host it was asked for."""
    path = str(tmp_path / "Srv.sock")
    server = _UnixHTTPServer(path, _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield path
    server.shutdown()
    server.server_close()


@pytest.fixture
def tcp_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_one_client_reaches_a_socket_and_a_tcp_server(socket_server: str, tcp_server: int) -> None:
    with http_client(5.0) as client:
        over_socket = client.get(Endpoint(socket_server).base_url + "/v1/models?limit=1")
        over_tcp = client.get(Endpoint("127.0.0.1", tcp_server).base_url + "/health")
    assert over_socket.text == "/v1/models?limit=1 localhost"
    assert over_tcp.text == f"/health 127.0.0.1:{tcp_server}"


def _profile(tmp_path: Path, body: str) -> Path:
    (tmp_path / "p.toml").write_text('binary = "/opt/llama-server"\nmodel = "/m.gguf"\nalias = "m"\n' + body)
    return tmp_path


def test_a_profile_on_a_socket_has_no_port_and_a_tcp_one_needs_one(tmp_path: Path) -> None:
    profile = load_profile(_profile(tmp_path, 'host = "/run/l.sock"\n'), "p")
    assert (profile.port, profile.endpoint.socket) == (None, "/run/l.sock")
    for body, said in (('host = "/run/l.sock"\nport = 8080\n', "llama-server ignores the port on a socket"),
                       ('host = "127.0.0.1"\n', "needs 'port' (or a Unix socket host"),
                       ('host = "l.sock"\nport = 1\n', "relative to its working directory"),
                       ('engine = "vllm"\nhost = "/run/l.sock"\n', "which specd knows of llama-server only")):
        with pytest.raises(ProfileError, match=re.escape(said)):
            load_profile(_profile(tmp_path, body), "p")


def test_a_unit_on_a_socket_is_read_as_one_and_refused_where_a_port_is_needed() -> None:
    argv = ["/opt/llama-server", "-m", "/m.gguf", "--host", "/run/l.sock"]
    text = f"[Service]\nExecStart={exec_start_line(argv)}\n"
    assert parse_unit(text).base_url == Endpoint("/run/l.sock").base_url
    beside = f"[Service]\nExecStart={exec_start_line([*argv, '--port', '9'])}\n"  # llama-server ignores the port
    assert parse_unit(beside).base_url == Endpoint("/run/l.sock").base_url
    with pytest.raises(UsageError, match="Unix socket /run/l.sock; a second server beside it needs a TCP port"):
        port_of(text)
    assert not same_but_port(text, text.replace("/m.gguf", "/n.gguf"))


@pytest.fixture
def socket_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    world = make_world(tmp_path, monkeypatch)
    (world.deployment.profiles_dir / "new.toml").write_text(
        'binary = "/opt/llama-server"\nmodel = "/m/new.gguf"\nalias = "tiny"\nhost = "/run/l.sock"\n'
        "health_timeout_s = 5\nstability_s = 0\n")
    return world


def test_a_forced_blue_green_to_a_socket_is_refused_naming_it_and_changes_nothing(socket_world: World) -> None:
    world = socket_world
    before = (world.blue.read_text(), world.serving_pid(), len(world.history.list(UNIT)))
    with pytest.raises(PreflightError, match=r"--strategy blue-green: the server listens on the Unix socket "
                                             r"/run/l.sock.*nothing was changed"):
        world.switcher().switch("new", "blue-green")
    assert (world.blue.read_text(), world.serving_pid(), len(world.history.list(UNIT))) == before
    assert world.systemd.calls == [] and not world.green.exists()


def test_auto_to_a_socket_restarts_in_place_and_says_why(socket_world: World) -> None:
    outcome = socket_world.switcher().switch("new")
    assert outcome.generation.strategy == "restart"
    assert "the server listens on the Unix socket /run/l.sock" in outcome.generation.detail


def test_a_socket_profile_with_a_proxy_is_refused_before_anything_changes(socket_world: World) -> None:
    world = socket_world
    profile = load_profile(world.deployment.profiles_dir, "new")
    with pytest.raises(PreflightError, match=r"host /run/l.sock is a Unix socket, and the deployment has a \[proxy\]"):
        check_socket(world.deployment, profile)
    assert any("[proxy] forwards to a TCP port only" in problem
               for problem in quick_problems(world.deployment, profile))


def test_the_daemons_proxy_refuses_a_server_on_a_socket_at_its_start_and_holds_requests_after(
        socket_world: World) -> None:
    world = socket_world
    argv = ["/opt/llama-server", "-m", "/m/new.gguf", "--host", "/run/l.sock"]
    world.blue.write_text(f"# specd-profile: new\n[Service]\nExecStart={exec_start_line(argv)}\n")
    with pytest.raises(ConfigError, match=r"listens on the Unix socket /run/l.sock, and the proxy forwards to a TCP"):
        backend_of(world.deployment, world.state, refuse_socket=True)
    assert backend_of(world.deployment, world.state) == NO_BACKEND


def test_a_socket_units_render_removes_the_stale_socket_once(tmp_path: Path) -> None:
    """llama-server cannot bind over the socket file a stopped server left (checked by hand against the pinned
    build: "couldn't bind HTTP server socket"): each start removes it first, once."""
    template = "[Service]\nExecStart=@EXEC_START@\n"

    def pre_lines(body: str) -> list[str]:
        profile = load_profile(_profile(tmp_path, 'host = "/run/l.sock"\n' + body), "p")
        text = render_unit(profile, ["/opt/llama-server"], scope="user", template=template)
        return [line for line in text.splitlines() if line.startswith("ExecStartPre=")]

    assert pre_lines("") == [f"ExecStartPre={exec_start_line(['/bin/rm', '-f', '--', '/run/l.sock'])}"]
    own = '[systemd.Service]\nExecStartPre = "/bin/rm -f /run/l.sock"\n'  # the AvaronInc unit's, carried
    assert pre_lines(own) == ["ExecStartPre=/bin/rm -f /run/l.sock"]
