"""Every word keeps its place and clients keep their id: generated units, checked against the real
systemd and the real llama-server.

Each example is a unit whose ExecStart= runs llama-server itself, llama.cpp's `llama serve|server`,
a wrapper script with its own words before the flags (and after them), or a launcher in front
(`nice -n 5`), with options in any order (some given twice), the model as -m/--model, -hf or from a
variable, with or without --alias, specifiers (%h %i) and continuations. `specd import` makes a
profile of it, specd renders the profile into a unit, and the real systemd says what both units run
(tests/system/systemd_truth.py). They must run the same wrapper and binary, the same words that are
no option in the same order and place, the same options (as llama-server reads them: the last of a
repeated one), nothing added; and the id llama-server serves (server_argv.served_id) must be the
same, and the one the profile's gate asks for. A handful of examples run the real binary (directly
or through a real wrapper script) on the tiny model, before and after, and compare /v1/models.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from specd.profiles.keys import BY_FLAG
from specd.setup.sandbox import PrivateSystemd, free_port
from tests.conftest import LLAMA_SERVER, TINY_MODEL, require_real_server
from tests.system import systemd_truth as truth
from tests.system.served_rig import hub_cache, listed_ids, running_command
from tests.system.server_argv import ServerCommand, command_problems, read_aliases, served_id, server_command
from tests.system.server_argv import effective as last_values
from tests.system.server_argv import flag_pairs as options_of

pytestmark = pytest.mark.systemd

SERVER = "/opt/llama/bin/llama-server"  # not on this box: import cannot ask it; the render uses the reference's help
LLAMA = "/usr/local/bin/llama"
SCRIPT = "/opt/llama/run-llama.sh"
TEMPLATE = f"specd-words-{os.getpid()}@.service"


@dataclass(frozen=True)
class Shape:
    form: str  # server | subcommand | wrapper | launcher
    leading: tuple[str, ...]  # the subcommand, or the wrapper's own words
    model: tuple[str, ...]  # -m PATH, --model ${MODEL}, -hf REPO, or () (router mode / the wrapper's word)
    alias: tuple[str, ...]
    options: tuple[tuple[str, ...], ...]  # each option with its value, in the order written
    trailing: tuple[str, ...] = ()  # a wrapper's words after the flags
    model_at: int = 0  # where the model option sits among the options
    continuation: bool = False

    def words(self, binary: str, port: int | None = None) -> list[str]:
        options = list(self.options)
        if self.model or self.alias:
            options.insert(min(self.model_at, len(options)), self.model + self.alias)
        if port is not None:
            options.append(("--port", str(port)))
        head = {"server": [binary], "subcommand": [LLAMA], "wrapper": [SCRIPT if binary == SERVER else binary],
                "launcher": ["/usr/bin/nice", "-n", "5", binary]}[self.form]
        return [*head, *self.leading, *(w for option in options for w in option), *self.trailing]

    def unit(self, binary: str, *, port: int | None = None, environment: str = "") -> str:
        words = self.words(binary, port)
        joiner = " \\\n    " if self.continuation else " "
        return f"[Unit]\nDescription=words %i\n[Service]\n{environment}ExecStart={joiner.join(words)}\n"


_VALUES = {"-c": ["256", "4096"], "--ctx-size": ["2048"], "-ngl": ["0", "99", "all"], "--n-gpu-layers": ["999"],
           "-t": ["1", "4"], "--threads": ["2"], "--temp": ["0.7", "1.0"], "--top-k": ["40"], "-fa": ["on", "off"],
           "--flash-attn": ["auto"], "-np": ["1"], "--parallel": ["2"], "--cache-type-k": ["q8_0"],
           "--mmproj": ["/models/mmproj-F16.gguf"], "--host": ["0.0.0.0", "127.0.0.1"], "--port": ["8081"],
           "--reasoning-budget": ["-1", "0"], "--seed": ["0"], "--slot-save-path": ["%h/slots/"]}
_SWITCHES = ["--jinja", "--swa-full", "--metrics", "--cont-batching", "--no-webui"]
# The tiny model on two shared cores: options a real start can take quickly.
_RUNNABLE = {"-c": ["256", "512"], "-t": ["1"], "--temp": ["0.7"], "--top-k": ["40"], "-fa": ["off"], "-np": ["1"],
             "-ngl": ["0"], "--seed": ["0"]}
_RUNNABLE_SWITCHES = ["--jinja", "--swa-full", "--no-warmup"]


def _option(values: dict[str, list[str]], switches: list[str]) -> st.SearchStrategy[tuple[str, ...]]:
    valued = st.sampled_from(sorted(values)).flatmap(lambda f: st.sampled_from(values[f]).map(lambda v: (f, v)))
    return st.one_of(valued, st.sampled_from(switches).map(lambda s: (s,)))


def _says_llama_server(options: Sequence[tuple[str, ...]]) -> bool:
    """A script's arguments say llama-server when one of them is a flag of specd's profile table; a
    wrapper with none (and no model) is refused as a script specd cannot see into (specd.unit.wrappers)."""
    return any(option[0] in BY_FLAG for option in options)


@st.composite
def shapes(draw: st.DrawFn) -> Shape:
    form = draw(st.sampled_from(["server", "subcommand", "wrapper", "launcher"]))
    leading: tuple[str, ...] = ()
    if form == "subcommand":
        leading = (draw(st.sampled_from(["serve", "server"])),)
    elif form == "wrapper":
        leading = tuple(draw(st.lists(st.sampled_from(["rocm", "%i", "qwen3-8b.gguf", "vulkan"]), min_size=1,
                                      max_size=2)))
    model = draw(st.sampled_from([("-m", "%h/models/Qwen3-8B-Q4_K_M.gguf"), ("--model", "${MODEL}"),
                                  ("-hf", "unsloth/Qwen3-8B-GGUF:Q4_K_M"), ("-m", "/models//a:b.gguf"), ()]))
    alias = draw(st.sampled_from([(), (), ("--alias", "qwen-%i"), ("-a", "one,two")])) if model else ()
    options: list[tuple[str, ...]] = draw(st.lists(_option(_VALUES, _SWITCHES), max_size=7))
    if form == "wrapper" and not model and not _says_llama_server(options):  # else refused, rightly
        options = [*options, ("-ngl", "99")]
    repeat = draw(st.booleans())
    first = next((o for o in options if len(o) == 2), None)
    if repeat and first is not None:  # an option given again, later: llama-server keeps the last value
        options.append((first[0], draw(st.sampled_from(_VALUES[first[0]]))))
    trailing = tuple(draw(st.lists(st.sampled_from(["fast", "%i"]), max_size=1))) if form == "wrapper" else ()
    return Shape(form, leading, model, alias, tuple(options), trailing, draw(st.integers(0, 7)), draw(st.booleans()))


@dataclass(frozen=True)
class Seen:
    """What systemd runs for a unit, as llama-server's argv, and the environment it gets."""

    command: ServerCommand
    environment: dict[str, str]


def _systemd_runs(manager: PrivateSystemd, unit: str, text: str, work: Path) -> Seen:
    truth.install(manager, unit.split("@")[0] + "@.service" if "@" in unit else unit, text.encode())
    truth.daemon_reload(manager)
    loaded = truth.read_loaded(manager, unit)
    assert loaded.load_state == "loaded" and len(loaded.exec_start) == 1, (loaded, text)
    [executed] = truth.execute_all(manager, [loaded], work)
    assert executed.argv is not None, executed.failure
    command = server_command(executed.path, executed.argv, executed.env, work)
    if not isinstance(command, ServerCommand):  # a wrapper script: its words are what is compared
        command = ServerCommand((), executed.path, executed.argv)
    return Seen(command, executed.env)


def _import_and_render(manager: PrivateSystemd, text: str, unit: str, work: Path) -> tuple[str, str | None]:
    """(the unit specd renders from its import of `text`, the id the profile's gate asks for)."""
    from specd.profiles.flags import binary_flags
    from specd.profiles.load import load_profile
    from specd.unit.importer import profile_from_unit, write_profile
    from specd.unit.render import build_argv, default_template_path, render_unit
    from specd.unit.specifiers import UnitContext

    context = UnitContext(unit, "user", home=manager.env["HOME"])
    result = profile_from_unit(text, str(work / unit), "generated", context)
    profiles = work / "profiles"
    profiles.mkdir(exist_ok=True)
    write_profile(profiles / "generated.toml", result, source="generated")
    profile = load_profile(profiles, "generated")
    reference = binary_flags(LLAMA_SERVER)
    flags = reference if profile.binary == LLAMA_SERVER else replace(reference, binary=str(profile.binary))
    argv = build_argv(profile, flags)
    rendered = render_unit(profile, argv, scope="user", template=default_template_path().read_text())
    return rendered, profile.alias.split(",")[0] if profile.alias else None


def _check(manager: PrivateSystemd, shape: Shape, text: str, work: Path) -> tuple[Seen, Seen, str | None]:
    instance = "qwen"
    unit = TEMPLATE.replace("@.", f"@{instance}.")
    before = _systemd_runs(manager, unit, text, work)
    rendered, gate = _import_and_render(manager, text, unit, work)
    after = _systemd_runs(manager, f"specd-words-rendered-{os.getpid()}.service", rendered, work)
    aliases = read_aliases(LLAMA_SERVER)
    assert command_problems(before.command, after.command, aliases) == [], (text, rendered)
    served_before = served_id(last_values(options_of(before.command.args, aliases)), before.environment)
    served_after = served_id(last_values(options_of(after.command.args, aliases)), after.environment)
    assert served_before == served_after, (text, rendered)
    if shape.form != "wrapper":  # a wrapper script's model is its own business; its words are kept
        assert gate == served_before, (text, gate, served_before)
    return before, after, gate


@pytest.mark.timeout(900)
@settings(max_examples=15, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@example(shape=Shape("subcommand", ("serve",), ("-m", "/m.gguf"), (), (("--port", "8081"), ("-ngl", "99")), (), 1))
@example(shape=Shape("wrapper", ("qwen3-8b.gguf", "%i"), (), (), (("--n-gpu-layers", "999"), ("--jinja",)),
                     ("fast",)))
@given(shape=shapes())
def test_imported_units_run_the_same_words_in_the_same_places(systemd_manager: PrivateSystemd, tmp_path: Path,
                                                                shape: Shape) -> None:
    require_real_server()
    environment = "Environment=MODEL=%h/models/from-variable.gguf\n" if "${MODEL}" in shape.model else ""
    _check(systemd_manager, shape, shape.unit(SERVER, environment=environment), tmp_path)


@st.composite
def runnable_shapes(draw: st.DrawFn) -> Shape:
    form = draw(st.sampled_from(["server", "wrapper"]))
    model: tuple[str, ...] = () if form == "wrapper" else draw(st.sampled_from([("-m", "TINY"), ("--model", "TINY"),
                                                                                 ("-hf", "specd/tiny:Q4_K_M")]))
    options = tuple(draw(st.lists(_option(_RUNNABLE, _RUNNABLE_SWITCHES), max_size=4)))
    alias = draw(st.sampled_from([(), ("--alias", "tiny-%i")]))
    if form == "wrapper" and not alias and not _says_llama_server(options):  # else refused, rightly
        options = (*options, ("-c", "256"))
    return Shape(form, ("TINY",) if form == "wrapper" else (), model, alias, options, (), draw(st.integers(0, 4)))


def _wrapper_script(work: Path) -> Path:
    """A real wrapper of jnb666/gpt-go's shape: the model first, llama-server's options after."""
    script = work / "run-llama.sh"
    script.write_text(f'#!/bin/bash\nmodel="$1"\nshift\nexec {LLAMA_SERVER} -m "$model" "$@"\n')
    script.chmod(0o755)
    return script


@pytest.mark.llama
@pytest.mark.timeout(900)
@settings(max_examples=3, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@example(shape=Shape("wrapper", ("TINY",), (), (), (("-c", "256"), ("--no-warmup",))))
@given(shape=runnable_shapes())
def test_the_real_binary_serves_the_same_id_before_and_after_import(systemd_manager: PrivateSystemd,
                                                                     tmp_path: Path, shape: Shape) -> None:
    require_real_server()
    cache = hub_cache(tmp_path / "hub", "specd/tiny", TINY_MODEL)
    binary = str(_wrapper_script(tmp_path)) if shape.form == "wrapper" else str(LLAMA_SERVER)
    port = free_port()
    text = shape.unit(binary, port=port, environment=f"Environment=LLAMA_CACHE={cache} LLAMA_ARG_OFFLINE=1\n")
    text = text.replace("TINY", str(TINY_MODEL))
    before, after, gate = _check(systemd_manager, shape, text, tmp_path)
    ids = []
    for seen in (before, after):
        command = [*seen.command.wrapper, seen.command.binary, *seen.command.args]
        with running_command(command, port, seen.environment) as url:
            ids.append(listed_ids(url))
    assert ids[0] == ids[1], (text, ids)
    if gate is not None:
        assert ids[0][0] == gate
