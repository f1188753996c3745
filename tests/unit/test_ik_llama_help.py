"""ik_llama.cpp's --help layout, and its own speculative tuner (`--spec-autotune`) as a profile key.

ik_llama.cpp prints its options indented ("  -md,   --model-draft FNAME", "         --port PORT") where
llama.cpp prints them at column 0, and its `--spec-type` placeholder is `SPEC[:k=v,...]` with the
types listed on a description line. IK_ENTRIES are `options.push_back` entries verbatim from
ikawrakow/ik_llama.cpp common/common.cpp at 8337e4c (2026-08-15), with the printf arguments (defaults)
filled by hand; `ik_usage` is that file's `gpt_params_print_usage` loop (`"  %-32s"`, a new
line after arguments longer than 30 characters, description lines indented by 34), so the text is
what that binary prints for these options. No ik_llama.cpp binary is built here. Its usage never
lists -a/--alias, which its parser takes (common.cpp: `arg == "-a" || arg == "--alias"`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specd.profiles.flags import parse_help
from specd.profiles.load import load_profile
from specd.unit.render import build_argv

IK_ENTRIES = (
    ("-c,    --ctx-size N", "size of the prompt context (default: 0, 0 = loaded from model)"),
    ("-np,   --parallel N", "number of parallel sequences to decode (default: 1)"),
    ("-m,    --model FNAME", ("model path (default: models/$filename with filename from --hf-file\n"
                              "or --model-url if set, otherwise models/7B/ggml-model-f16.gguf)")),
    ("-md,   --model-draft FNAME", "draft model for speculative decoding (default: unused)"),
    ("--spec-type SPEC[:k=v,...]", (
        "canonical speculative stage entry; repeat for a supported two-stage chain.\n"
        "types: none, draft, dflash, dspark, mtp, ngram-cache, ngram-simple, ngram-map-k, ngram-map-k4v, "
        "ngram-mod, suffix\n"
        "canonical keys: n_max,n_min,p_min,heads,cross_ctx,ngram_size_n,ngram_size_m,ngram_min_hits,"
        "suffix_min_match_len,suffix_max_depth,suffix_corpus\n"
        "MTP heads: heads=1 is the default; heads>1 and heads=0 (all model heads) are experimental\n"
        "for comma-bearing string values, quote the value inside the stage payload for normal shell use\n"
        "if argv is passed directly without shell unescaping, the parser also accepts escaped commas as \\,\n"
        "examples: --spec-type mtp:n_max=1,p_min=0.0\n"
        "          --model-draft draft.gguf --spec-type dflash:n_max=4,cross_ctx=512\n"
        "          --spec-type ngram-mod:n_max=64,n_min=2,ngram_size_n=8 --spec-type mtp:n_max=1,p_min=0.0\n"
        "          --spec-type \"suffix:n_max=16,n_min=2,suffix_min_match_len=5,suffix_max_depth=64,"
        "suffix_corpus='/tmp/spec,type-corpus.json'\"\n"
        "legacy --spec-stage, --draft-*, --spec-ngram-*, --suffix-* and -mtp flags are rejected"
    )),
    ("--spec-autotune", "automatically tune speculative params to maximize tokens/sec"),
    ("       --host HOST", "ip address to listen (default: 127.0.0.1)"),
    ("       --port PORT", "port to listen (default: 8080)"),
    ("       --metrics", "enable prometheus compatible metrics endpoint (default: disabled)"),
)


def ik_usage(entries: tuple[tuple[str, str], ...]) -> str:
    """gpt_params_print_usage's loop, in Python."""
    out = ["usage: llama-server [options]\n"]
    for args, desc in entries:
        out.append(f"  {args:<32}")
        if len(args) > 30:
            out.append("\n" + " " * 34)
        out.append(desc.replace("\n", "\n" + " " * 34) + "\n")
    return "".join(out)


IK_HELP = ik_usage(IK_ENTRIES)


def test_indented_options_and_the_types_line_are_read() -> None:
    flags = parse_help("/opt/ik_llama/llama-server", IK_HELP)
    for flag in ("--model", "-m", "-md", "--model-draft", "--spec-type", "--spec-autotune", "--port", "--metrics"):
        assert flags.has(flag), flag
    assert {"--model", "--port", "--ctx-size", "--spec-type"} <= flags.valued
    assert "--spec-autotune" not in flags.valued and "--metrics" not in flags.valued
    assert flags.spec_types == ("none", "draft", "dflash", "dspark", "mtp", "ngram-cache", "ngram-simple",
                                "ngram-map-k", "ngram-map-k4v", "ngram-mod", "suffix")
    assert not flags.has("--legacy") and not flags.has("--draft-max")  # words of a description are not options
    assert flags.has("--alias") and "--alias" in flags.valued  # taken by its parser, missing from its usage


def test_an_mtp_profile_with_the_engines_tuner_renders_ik_llamas_spelling(tmp_path: Path) -> None:
    (tmp_path / "mtp.toml").write_text('binary = "/opt/ik_llama/llama-server"\nmodel = "/m/q.gguf"\nalias = "q"\n'
                                       'port = 8080\n[speculative]\ntype = "mtp:n_max=2"\nautotune = true\n')
    argv = build_argv(load_profile(tmp_path, "mtp"), parse_help("/opt/ik_llama/llama-server", IK_HELP))
    assert argv[argv.index("--spec-type") + 1] == "mtp:n_max=2"
    assert "--spec-autotune" in argv and argv[argv.index("--model") + 1] == "/m/q.gguf"
    assert argv[argv.index("--alias") + 1] == "q"


def test_draft_settings_by_legacy_flag_are_refused_on_ik_llama_with_the_key_named(tmp_path: Path) -> None:
    """ik_llama.cpp rejects --draft-*: the setting goes inside the type (`mtp:n_max=2`); specd says so
    before anything is written rather than let the server refuse to start."""
    from specd.errors import PreflightError

    (tmp_path / "mtp.toml").write_text('binary = "/opt/ik_llama/llama-server"\nmodel = "/m/q.gguf"\nalias = "q"\n'
                                       'port = 8080\n[speculative]\ntype = "mtp"\ndraft_n_max = 2\n')
    with pytest.raises(PreflightError, match=r"draft_n_max needs one of --spec-draft-n-max, --draft-max"):
        build_argv(load_profile(tmp_path, "mtp"), parse_help("/opt/ik_llama/llama-server", IK_HELP))


def test_an_ik_llama_unit_with_the_engines_tuner_imports_it_as_the_speculative_key(tmp_path: Path) -> None:
    """A public ik_llama.cpp launch script runs `-mtp --draft-max 14 --spec-autotune`; here in the spelling
    today's ik_llama.cpp takes (it rejects the legacy -mtp and --draft-* flags)."""
    from specd.unit.importer import profile_from_unit, write_profile
    from specd.unit.specifiers import UnitContext

    unit = ("[Service]\nExecStart=/opt/ik_llama/bin/llama-server -m /models/q.gguf -a qwen --port 8080 "
            "--spec-type mtp:n_max=14 --spec-autotune\n")
    result = profile_from_unit(unit, "/etc/systemd/system/ik.service", "ik",
                               UnitContext("ik.service", "system", home="/root", user="root", uid=0))
    assert result.data["speculative"] == {"type": "mtp:n_max=14", "autotune": True}
    write_profile(tmp_path / "ik.toml", result, source="test")
    argv = build_argv(load_profile(tmp_path, "ik"), parse_help("/opt/ik_llama/bin/llama-server", IK_HELP))
    assert argv[argv.index("--spec-type") + 1] == "mtp:n_max=14" and "--spec-autotune" in argv
