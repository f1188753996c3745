"""specd reads ExecStart= exactly as systemd does: generated units, checked against the real systemd.

Each example is a template-unit instance with an ExecStart= built from double- and single-quoted
words with C escapes, specifiers (%h %i %n %%), `$VAR` and `${VAR}` references to Environment=
assignments (defined or not), split over `\\` continuations with comment lines inside. The truth
is what the private `systemd --user` manager makes of it: its parse (the D-Bus ExecStart, as in
`systemctl --user show -p ExecStart`) and its exec-time `$VAR` expansion, recorded by a probe
(tests/system/systemd_truth.py). specd's side is `specd_exec_argv` below: the one place that
knows specd's parser API (specd.unit.parse), so a rewrite of that API only touches it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from specd.setup.sandbox import PrivateSystemd
from tests.system import systemd_truth as truth

pytestmark = pytest.mark.systemd

PROGRAM = "/opt/llama.cpp/build/bin/llama-server"
TEMPLATE = "specd-prop@.service"


@dataclass(frozen=True)
class UnitContext:
    """What systemd resolves a unit's specifiers and variables against."""

    unit_name: str  # the instance's full name, e.g. specd-prop@qwen.service (%n; %i is the part after @)
    home: str  # %h of the manager that loads the unit


def specd_exec_argv(text: str, context: UnitContext) -> list[str]:
    """specd's reading of `text`: the argv (program first) that the unit's process would receive.

    specd.unit.parse.read_unit(text, where, UnitContext) resolves specifiers for the unit's name
    and its manager's home, and variables from its Environment=.
    """
    from specd.unit.parse import read_unit
    from specd.unit.specifiers import UnitContext as SpecdContext

    return list(read_unit(text, context.unit_name,
                          SpecdContext(context.unit_name, "user", home=context.home)).command.argv)


def specd_rendered_unit(argv: list[str]) -> str:
    """The ExecStart= specd renders for an argv (specd.unit.render's quoting)."""
    from specd.unit.render import exec_start_line

    return f"[Service]\nExecStart={exec_start_line(argv)}\n"


# ---- generating units ------------------------------------------------------------------------

NAMES = ("MODEL", "ARGS", "LLAMA_ARG_X", "UNSET_VAR")  # UNSET_VAR is never assigned
SAFE = st.text(alphabet="abcXYZ019_./:=,+-", min_size=1, max_size=6)
SPECIFIER = st.sampled_from(["%h", "%i", "%n", "%%"])
ESCAPE = st.sampled_from(["\\t", "\\n", "\\\\", "\\x41", "\\101", "\\u00e9", "\\a", "\\s"])


@st.composite
def exec_word(draw: st.DrawFn) -> str:
    """One ExecStart word as written in the unit file."""
    kind = draw(st.sampled_from(["bare", "double", "single", "var", "braced"]))
    if kind == "var":
        return "$" + draw(st.sampled_from(NAMES))
    parts = draw(st.lists(st.one_of(SAFE, SPECIFIER, st.sampled_from(NAMES).map(lambda n: "${" + n + "}")),
                          min_size=1, max_size=3))
    if kind == "braced":
        return "".join(parts)
    if kind == "bare":
        word = "".join(parts)
        return word if not word.startswith(("-", "@", "+", "!", ":")) else "x" + word
    inside = draw(st.lists(st.one_of(st.just(" "), ESCAPE, st.just('"' if kind == "single" else "'")),
                           max_size=3))
    body = "".join(draw(st.permutations(parts + inside)))
    quote = '"' if kind == "double" else "'"
    return quote + body + quote


@st.composite
def env_line(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(NAMES[:3]))
    value = " ".join(draw(st.lists(st.one_of(SAFE, SPECIFIER), min_size=1, max_size=3)))
    if " " in value or draw(st.booleans()):
        return f'Environment="{name}={value}"'
    return f"Environment={name}={value}"


@st.composite
def unit_text(draw: st.DrawFn) -> str:
    words = draw(st.lists(exec_word(), min_size=1, max_size=6))
    lines = ["[Unit]", "Description=generated %i", "", "[Service]"]
    lines += draw(st.lists(env_line(), max_size=3))
    exec_lines = [f"ExecStart={PROGRAM}"]
    for word in words:
        if draw(st.booleans()):  # continue on the next line
            exec_lines[-1] += " \\"
            if draw(st.booleans()):
                exec_lines.append(draw(st.sampled_from(["# a comment line", "; another", "#--port 9"])))
            exec_lines.append("  " + word)
        else:
            exec_lines[-1] += " " + word
    lines += exec_lines
    lines += ["Restart=on-failure", "", "[Install]", "WantedBy=default.target", ""]
    return "\n".join(lines)


INSTANCE = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=8)


# ---- the property ----------------------------------------------------------------------------

def systemd_exec_argv(manager: PrivateSystemd, text: str, instance: str, work: Path) -> list[str] | str:
    """[program, *argv] as systemd would exec it, or why systemd would not."""
    truth.install(manager, TEMPLATE, text.encode())
    truth.daemon_reload(manager)
    unit = f"specd-prop@{instance}.service"
    loaded = truth.read_loaded(manager, unit)
    if loaded.load_state != "loaded" or len(loaded.exec_start) != 1:
        return f"systemd: LoadState={loaded.load_state} {loaded.load_error}, {len(loaded.exec_start)} ExecStart="
    [executed] = truth.execute_all(manager, [loaded], work)
    if executed.argv is None:
        return executed.failure
    return [executed.path, *executed.argv]


@pytest.mark.timeout(300)
@settings(max_examples=40, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@example(text="[Service]\nEnvironment=\"ARGS=-c 2048 -fa on\" MODEL=%h/m.gguf\n"
              f"ExecStart={PROGRAM} \\\n# --port 9\n  -m ${{MODEL}} $ARGS --alias %i 'a\\tb' \"100%%\"\n",
         instance="qwen")
@example(text=f"[Service]\nExecStart={PROGRAM} --api-key \"$${{KEY}}\" -n %n '\\x41\\101' ${{UNSET_VAR}} $UNSET_VAR\n",
         instance="x1")
@given(text=unit_text(), instance=INSTANCE)
def test_specd_reads_exec_start_as_systemd_does(systemd_manager: PrivateSystemd, tmp_path: Path, text: str,
                                                instance: str) -> None:
    expected = systemd_exec_argv(systemd_manager, text, instance, tmp_path)
    assert isinstance(expected, list), f"the generator wrote a unit systemd does not run: {expected}\n{text}"
    context = UnitContext(f"specd-prop@{instance}.service", systemd_manager.env["HOME"])
    try:
        got: list[str] | str = specd_exec_argv(text, context)
    except Exception as exc:  # noqa: BLE001  (a refusal of a unit systemd runs is a disagreement too)
        got = f"{type(exc).__name__}: {exc}"
    assert got == expected, (f"unit (instance {instance!r}):\n{text}\nsystemd runs: {expected}\n"
                             f"specd reads:  {got}")
    # ...and what specd renders from that reading, systemd runs as the same argv.
    rendered = systemd_exec_argv(systemd_manager, specd_rendered_unit(expected), instance, tmp_path)
    assert rendered == expected, f"specd renders {specd_rendered_unit(expected)!r}; systemd runs {rendered}"


@pytest.mark.own_threads


def test_generated_units_cover_every_feature() -> None:
    """The generator reaches each feature the property is about (checked on a fixed sample)."""
    features = {"double quote": '"', "single quote": "'", "C escape": "\\x41", "%h": "%h", "%i": "%i",
                "%n": "%n", "%%": "%%", "continuation": " \\\n", "comment in continuation": "\n# a comment",
                "${VAR}": "${", "$VAR word": " $", "Environment=": "Environment="}
    seen: set[str] = set()

    @settings(max_examples=300, database=None, derandomize=True)
    @given(text=unit_text())
    def collect(text: str) -> None:
        seen.update(name for name, needle in features.items() if needle in text)

    collect()
    assert seen == set(features), f"never generated: {set(features) - seen}"
