"""A build that speculates by default: type = "none" must render what turns every speculator off.

REFERENCE_EXCERPT is verbatim from the pinned llama-server's `--help` (llama.cpp as vendored in
llama-cpp-python 0.3.36): it has `--spec-default`, an opt-in ("enable default speculative decoding
config"), and `--spec-type ... (default: none)`, so nothing is added there. DEFAULT_ON is the layout
of ggml-org/llama.cpp PR #28391 (ngram-mod on by default, `--no-spec-type` removes types), as the FAKE
server (tests/fakes/fake_llama_server.py --fake-spec-default-on) prints it.
"""

from __future__ import annotations

from pathlib import Path

from specd.profiles.flags import parse_help
from specd.profiles.load import load_profile
from specd.unit.render import build_argv
from tests.fakes.fake_llama_server import HELP, SPEC_TYPE_ON

REFERENCE_EXCERPT = """\
--port PORT                             port to listen (default: 8080)
                                        (env: LLAMA_ARG_PORT)
--spec-type none,draft-simple,draft-eagle3,draft-mtp,draft-dflash,draft-dspark,ngram-simple,ngram-map-k,\
ngram-map-k4v,ngram-mod,ngram-cache
                                        comma-separated list of types of speculative decoding to use (default:
                                        none)
                                        \n\
                                        (env: LLAMA_ARG_SPEC_TYPE)
--spec-draft-n-max N                    number of tokens to draft for speculative decoding (default: 3)
                                        (env: LLAMA_ARG_SPEC_DRAFT_N_MAX)
--spec-default                          enable default speculative decoding config
"""
DEFAULT_ON = HELP.replace("@SPEC_TYPE@", SPEC_TYPE_ON)
NO_DEFAULT_WORDS = DEFAULT_ON.replace("default config (default: ngram-mod)", "default config")


def argv_of(tmp_path: Path, help_text: str, spec_type: str) -> list[str]:
    (tmp_path / "p.toml").write_text(f'binary = "/opt/llama-server"\nport = 8080\nmodel = "/m.gguf"\nalias = "a"\n'
                                     f'[speculative]\ntype = "{spec_type}"\n')
    return build_argv(load_profile(tmp_path, "p"), parse_help("/opt/llama-server", help_text))[1:]


def test_type_none_turns_the_default_speculator_off_on_a_default_on_build(tmp_path: Path) -> None:
    argv = argv_of(tmp_path, DEFAULT_ON, "none")
    assert argv[argv.index("--no-spec-type") + 1] == "ngram-mod"
    assert "--spec-type" not in argv


def test_without_a_readable_default_every_offered_type_is_removed(tmp_path: Path) -> None:
    argv = argv_of(tmp_path, NO_DEFAULT_WORDS, "none")
    assert argv[argv.index("--no-spec-type") + 1].split(",") == ["draft-simple", "draft-mtp", "ngram-simple",
                                                                 "ngram-mod"]


def test_a_speculative_profile_is_rendered_as_before_on_a_default_on_build(tmp_path: Path) -> None:
    argv = argv_of(tmp_path, DEFAULT_ON, "ngram-simple")
    assert argv[argv.index("--spec-type") + 1] == "ngram-simple" and "--no-spec-type" not in argv


def test_the_pinned_build_speculates_only_when_told_so_none_adds_nothing(tmp_path: Path) -> None:
    flags = parse_help("/opt/llama-server", REFERENCE_EXCERPT)
    assert flags.has("--spec-default") and flags.spec_default == () and flags.speculation_off() == []
    argv = argv_of(tmp_path, HELP.replace("@SPEC_TYPE@", REFERENCE_EXCERPT), "none")
    assert "--spec-type" not in argv and "--no-spec-type" not in argv


def test_a_default_without_a_removal_flag_is_turned_off_with_spec_type_none() -> None:
    help_text = REFERENCE_EXCERPT.replace("(default:\n                                        none)",
                                          "(default: ngram-mod)")
    assert parse_help("/opt/llama-server", help_text).speculation_off() == ["--spec-type", "none"]
