"""Profile -> llama-server argv -> unit file text. Pure: no files but the template are read.

Quoting follows systemd.syntax(7) and systemd.service(5): every ExecStart argument is written
in double quotes with C escapes for `\\` and `"`, `%` doubled (specifiers) and `$` doubled
(environment expansion), so llama-server receives each argument byte for byte. Control
characters cannot be represented safely and are refused before we get here (schema) and here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from specd import paths
from specd.errors import PreflightError, ProfileError
from specd.profiles.flags import BinaryFlags
from specd.profiles.keys import SPECULATIVE_KEYS, TOP_KEYS, ProfileKey, reported_model_id
from specd.profiles.load import Directive, Profile

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
PROFILE_MARKER = "# specd-profile: "


def _refuse_control(value: str, what: str) -> None:
    if _CONTROL.search(value):
        raise ProfileError(f"{what} contains a control character ({value!r}); it cannot go into a unit file")


def quote_exec_arg(arg: str) -> str:
    """One argv element as an ExecStart word that systemd parses back to exactly `arg`; a control
    character (a tab an imported unit wrote as `\\t`) becomes a C escape, never a raw byte."""
    if "\0" in arg:
        raise ProfileError(f"argument {arg!r} contains a NUL byte; no program can receive it")
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return '"' + _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", escaped) + '"'


def quote_environment(name: str, value: str) -> str:
    """An Environment= assignment; values get specifier and C escaping, no `$` expansion there."""
    _refuse_control(value, f"environment variable {name}")
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'Environment="{name}={escaped}"'


def exec_start_line(argv: list[str]) -> str:
    return " ".join(quote_exec_arg(arg) for arg in argv)


def _escape_specifiers(text: str) -> str:
    return text.replace("%", "%%")


def _spelling(flags: BinaryFlags, key: ProfileKey, profile: Profile) -> str:
    for spelling in key.flags:
        if flags.has(spelling):
            return spelling
    raise PreflightError(
        f"profile '{profile.name}': {key.name} needs one of {', '.join(key.flags)}, "
        f"but {profile.binary} offers none of them"
    )


def _format(value: object) -> str:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Path):
        return str(value)
    return str(value)


def _without_flag(profile: Profile, flags: BinaryFlags, key: ProfileKey, written: str) -> bool:
    """Whether the server gets `key` = `written` with no flag at all: the profile says the key is implicit
    and the server gets it anyway, from its LLAMA_ARG_* variable in [env] or by itself (its --help's
    default; for the alias, the id it reports). A profile without `implicit` (written before there was
    one) keeps the old rule: a key its [env] variable already sets to that value gets no flag."""
    from_environment = dict(profile.env).get(flags.variable_of(key.flags[0])) == written
    if not profile.implicit or from_environment:
        return from_environment and (not profile.implicit or key.name in profile.implicit)
    if key.name not in profile.implicit:
        return False
    if key.name == "alias":
        paths = dict(profile.written_paths)
        return written == reported_model_id(paths.get("model"), profile.hf_repo)
    return key.name in ("host", "port") and flags.default_of(key.flags[0]) == written


def _typed_flags(profile: Profile, flags: BinaryFlags) -> list[str]:
    """The profile's top-level typed keys as flags, in the keys' order."""
    argv: list[str] = []
    for key in TOP_KEYS:
        value = getattr(profile, key.name) if key.flags else None
        if value is None or value is False:
            continue
        if key.name != "api_key" and _without_flag(profile, flags, key, dict(profile.written_paths).get(
                key.name, _format(value))):
            continue
        if key.name == "api_key":
            argv += ["--api-key-file", str(paths.api_key_file(value))]  # the key itself stays out of the unit
        elif key.kind is bool:
            argv.append(_spelling(flags, key, profile))
        else:
            written = dict(profile.written_paths).get(key.name, _format(value))
            argv += [_spelling(flags, key, profile), written]
    return argv


def build_argv(profile: Profile, flags: BinaryFlags) -> list[str]:
    """The exact argv the unit will run; every flag is checked against the binary's --help."""
    if profile.router and not flags.has("--models-dir"):
        raise PreflightError(f"profile '{profile.name}': router = true, but {profile.binary} has no router mode "
                             "(no --models-dir in its --help): without a model it would not start")
    argv = [str(profile.binary), *profile.binary_args, *_typed_flags(profile, flags)]
    spec = profile.speculative
    if spec.type != "none":
        argv += ["--spec-type", flags.spec_type_spelling(spec.type, profile_name=profile.name)]
        for key in SPECULATIVE_KEYS:
            value = getattr(spec, key.name)
            if value is None or value is False or key.name == "type":
                continue
            if key.kind is bool:
                argv.append(_spelling(flags, key, profile))
                continue
            written = dict(profile.written_paths).get(f"speculative.{key.name}", _format(value))
            argv += [_spelling(flags, key, profile), written]
    else:
        argv += flags.speculation_off()  # a build that speculates by default: "none" must mean none
    taken = {flags.canonical(a) for a in argv[1:] if a.startswith("-")}
    for arg in profile.args:
        if arg.startswith("-") and flags.canonical(arg) in taken and arg != "--metrics":
            raise ProfileError(
                f"{profile.path}: 'args' repeats {arg}, which the profile already sets through a typed key"
            )
    argv += list(profile.args)
    unknown = [a for a in argv[1:] if a.startswith("-") and not _is_number(a) and not flags.has(a.split("=", 1)[0])]
    if unknown:
        raise PreflightError(
            f"profile '{profile.name}': {profile.binary} does not accept {', '.join(unknown)} "
            "(not in its --help)"
        )
    return [*profile.launcher, *argv]


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def secret_files(profile: Profile) -> tuple[tuple[Path, str], ...]:
    """Files the unit reads that specd writes (0600) before installing it: the API key."""
    return ((paths.api_key_file(profile.api_key), profile.api_key + "\n"),) if profile.api_key else ()


def default_template_path() -> Path:
    override = os.environ.get("SPECD_UNIT_TEMPLATE")
    if override:
        return Path(override)
    return paths.shipped("units", "llama-server.service.in")


OUTPUT_KEYS = ("StandardOutput", "StandardError")


def output_directives(profile: Profile, output_file: str | None) -> tuple[Directive, ...]:
    """Where llama-server's output goes when it cannot go to the journal (none runs): appended to
    `output_file`, stderr with it. Nothing when the profile routes its output itself."""
    if output_file is None or any(d.section == "Service" and d.key in OUTPUT_KEYS for d in profile.systemd):
        return ()
    _refuse_control(output_file, "output file")
    return (Directive("Service", "StandardOutput", f"append:{output_file}"),
            Directive("Service", "StandardError", "inherit"))


def socket_directives(profile: Profile) -> tuple[Directive, ...]:
    """For a server on a Unix socket (specd.endpoint): llama-server leaves its socket file behind when it
    stops and cannot bind a path that exists ("couldn't bind HTTP server socket"), so a restart would fail;
    the unit removes it before each start, as hand-written socket units do (`ExecStartPre=/bin/rm -f`),
    unless the profile's own ExecStartPre= names the socket already."""
    socket = profile.endpoint.socket
    if socket is None or any(d.key == "ExecStartPre" and socket in d.value for d in profile.systemd):
        return ()
    return (Directive("Service", "ExecStartPre", exec_start_line(["/bin/rm", "-f", "--", socket])),)


def render_unit(profile: Profile, argv: list[str], *, scope: str, template: str,
                output_file: str | None = None) -> str:
    """The unit text; `output_file` (a box without systemd-journald) keeps the server's output there."""
    environment = "".join(quote_environment(name, value) + "\n" for name, value in profile.env)
    replacements = {
        "@PROFILE@": profile.name,
        "@PROFILE_FILE@": str(profile.path),
        "@ALIAS@": _escape_specifiers(profile.alias or "router"),
        "@ENGINE@": profile.engine,
        "@ENVIRONMENT@": environment,
        "@EXEC_START@": exec_start_line(argv),
        "@WANTED_BY@": "default.target" if scope == "user" else "multi-user.target",
    }
    _refuse_control(str(profile.path), "profile path")
    text = template
    for marker, value in replacements.items():
        text = text.replace(marker, value)
    return carry_directives(text, (*output_directives(profile, output_file), *socket_directives(profile),
                                   *profile.systemd))


def carry_directives(text: str, directives: tuple[Directive, ...]) -> str:
    """Put the profile's own systemd directives into the rendered unit: a key the template sets in
    that section (Restart=, Type=, ...) is replaced by the profile's, any other is added to it."""
    if not directives:
        return text
    for directive in directives:
        _refuse_control(directive.value, f"{directive.section}/{directive.key}")
    lines = text.splitlines()
    out: list[str] = []
    section = ""
    overridden = {(d.section, d.key) for d in directives}

    def close(name: str) -> None:
        out.extend(f"{d.key}={d.value}" for d in directives if d.section == name)

    for line in lines:
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            while out and not out[-1].strip():
                out.pop()
            close(section)
            if section:
                out.append("")
            section = stripped[1:-1]
            out.append(line)
            continue
        key = stripped.split("=", 1)[0].strip() if "=" in stripped and not stripped.startswith("#") else ""
        if key and (section, key) in overridden:
            continue
        out.append(line)
    close(section)
    return "\n".join(out) + "\n"


def profile_of_unit(text: str) -> str | None:
    """The profile name specd wrote into a unit, or None for a unit specd did not render."""
    for line in text.splitlines():
        if line.startswith(PROFILE_MARKER):
            return line[len(PROFILE_MARKER):].strip() or None
    return None
