"""What counts as a secret in a file specd writes or shows: detecting one, and masking it.

A key reaches llama-server as `--api-key K`, `LLAMA_ARG_API_KEY=K` or a profile's `api_key = "K"`
(and a Hugging Face token as `--hf-token`/`HF_TOKEN`). A *reference* to a key is no secret:
`--api-key-file`, `api_key_file`, `LLAMA_ARG_API_KEY_FILE`, systemd's `LoadCredential=`. Every file
specd writes goes through `specd.durable.atomic_write`, which makes one that holds a secret 0600
whatever mode it was asked for; `specd doctor` warns about one that others can read, and `specd show`
prints the unit with its keys masked.

Detection is by name, over the file's text, and errs on the side of privacy: a comment that names
`api_key` makes its file 0600 too, which costs nothing.
"""

from __future__ import annotations

import re

# A key's name, not followed by _file/-file (a path to a key is not the key).
_SECRET_NAME = re.compile(rb"(?i)(api[_-]?key|hf[_-]token)(?![_-]?file)")
# The value after a secret flag or variable, in a unit's ExecStart=/Environment= or a profile's args.
_FLAG_VALUE = re.compile(r"(?i)(--api-key|--hf-token)(?![-_]?file)(=|\s+|\"\s*,\s*\")([^\s\"',]+)")
_ENV_VALUE = re.compile(r"(?i)\b((?:LLAMA_ARG_)?(?:API_KEY|HF_TOKEN))(?!_FILE)(\s*=\s*\"?)([^\s\"']+)")
_TOML_VALUE = re.compile(r"(?im)^(\s*api_key\s*=\s*)(\"[^\"]*\"|'[^']*')")
MASK = "…"


def holds_secret(data: bytes | str) -> bool:
    """Does this text name a key (not a key file)? Then others must not read the file it is in."""
    return _SECRET_NAME.search(data.encode("utf-8") if isinstance(data, str) else data) is not None


def private_mode(mode: int, data: bytes | str) -> int:
    """`mode`, without the group and other bits when `data` holds a secret."""
    return mode & 0o700 if holds_secret(data) else mode


def mask(text: str) -> str:
    """The text with every key's value replaced by `…` (unit text, a profile, an argv joined)."""
    text = _FLAG_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _ENV_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    return _TOML_VALUE.sub(lambda m: f'{m.group(1)}"{MASK}"', text)


_SECRET_FLAGS = ("--api-key", "--hf-token")


def mask_argv(argv: list[str]) -> list[str]:
    """An argv with the value of each key flag replaced by `…` (`--api-key K`, `--api-key=K`)."""
    masked: list[str] = []
    for index, word in enumerate(argv):
        if index and argv[index - 1] in _SECRET_FLAGS:
            masked.append(MASK)
        elif word.startswith(tuple(f"{flag}=" for flag in _SECRET_FLAGS)):
            masked.append(f"{word.split('=', 1)[0]}={MASK}")
        else:
            masked.append(word)
    return masked


def readable_by_others(mode: int) -> bool:
    """Can users other than the owner read a file of this mode (its group or everyone)?"""
    return bool(mode & 0o044)
