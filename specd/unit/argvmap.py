"""What each word of a llama-server command line becomes in a profile, as llama-server itself reads it.

Read the way llama.cpp's parser (common/arg.cpp) reads argv: an option that takes a value takes
the next word, whatever it is; `--name=value` only for long options; `_` in a long option is `-`;
a word that is no option is an error (`error: invalid argument`); an option given twice keeps the
last value (`--spec-type` adds up). Whether an option takes a value is the binary's --help's call
when the binary could be asked; otherwise specd's own table for the keys it types, and the word's
look for the rest, keeping anything it cannot decide as written, beside its neighbour.

Words before the first option stay in their place (`binary_args`): the subcommand of llama.cpp's
`llama serve`, or a wrapper script's own arguments. A word after the options of a binary that
could not be asked keeps its place too: it and everything after it stay as written, in order.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specd.errors import UsageError
from specd.profiles.flags import SPEC_TYPE_SPELLINGS, BinaryFlags
from specd.profiles.keys import BY_FLAG, PROFILE_SCHEMA, SPECULATIVE_SCHEMA, ProfileKey
from specd.profiles.schema import Table, validate
from specd.unit.recognise import SUBCOMMANDS

SECRET = frozenset({"api_key"})
# Keys specd itself needs a value for: where the server listens, what it serves, its key.
NEEDED = frozenset({"host", "port", "alias", "model", "hf_repo", "models_dir", "models_preset", "api_key"})
_NUMBER = re.compile(r"-\d+(\.\d+)?")


@dataclass(frozen=True)
class Word:
    """One option with its value, or a word that is none: as llama-server groups the argv."""

    words: tuple[str, ...]  # as written
    name: str | None = None  # the option as llama-server looks it up (`_` -> `-` in long options); None: a word
    value: str | None = None

    @property
    def text(self) -> str:
        return " ".join(self.words)


@dataclass
class Mapping:
    """The profile keys the command line sets, and what is left for `args` and `binary_args`."""

    data: dict[str, Any]
    speculative: dict[str, Any] = field(default_factory=dict)
    binary_args: list[str] = field(default_factory=list)
    rest: list[str] = field(default_factory=list)
    speculative_words: list[tuple[str, ...]] = field(default_factory=list)  # as written, for `unspeculative`
    rows: list[tuple[str, str]] = field(default_factory=list)

    def row(self, source: str, became: str) -> None:
        self.rows.append((source, became))


def is_option(word: str) -> bool:
    return word.startswith("-") and len(word) > 1 and _NUMBER.fullmatch(word) is None


def option_name(word: str) -> str:
    """The spelling llama-server looks up: it turns `_` into `-` in a long option (arg.cpp)."""
    return word.replace("_", "-") if word.startswith("--") else word


def _spec_type(spelling: str) -> str:
    """specd's name for one speculative type, or the binary's spelling as written (chains, parameters)."""
    return next((name for name, spellings in SPEC_TYPE_SPELLINGS.items() if spelling in spellings), spelling)


def convert(value: str, kind: Any) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for number in (int, float):
        if number in kinds:
            try:
                return number(value)
            except ValueError:
                pass
    return value


def accepts(schema: Table, key: str, value: Any) -> bool:
    return not validate({key: value}, schema, path=Path("import"), text="")


def shown(key: str, value: Any) -> str:
    return "'…' (hidden)" if key in SECRET else repr(value)


class ArgvReader:
    """Groups argv into options and values (see the module docstring), refusing what would stop the server."""

    def __init__(self, binary: str, flags: BinaryFlags | None, where: str,
                 empty_cause: Callable[[str], str] = lambda flag: "") -> None:
        self.binary, self.flags, self.where, self.empty_cause = binary, flags, where, empty_cause

    def _takes_value(self, name: str, following: str | None) -> bool | None:
        """True/False when known; None: undecidable here (kept as written with its neighbour)."""
        if self.flags is not None:
            known = self.flags.takes_value(name)
            if known is None:
                raise UsageError(f"{self.where}: {name} is not an option of {self.binary} (its --help lists no "
                                 f"such option): llama-server would stop with 'error: invalid argument: {name}'; "
                                 "drop it from the unit, then import")
            return known
        key = BY_FLAG.get(name)
        if key is not None and key.kind is bool:
            return False
        if key is not None and following is not None and not is_option(following):
            return True
        if key is not None and key.name in NEEDED:
            raise UsageError(f"{self.where}: {name} has no value (it is followed by {following or 'nothing'})"
                             f"{self._cause(name)}; llama-server would take {following or 'nothing'} as it: "
                             "fix the unit, then import")
        return None  # a value in specd's table but a switch in older builds (a bare -fa); or an option it does not type

    def group(self, words: list[str]) -> tuple[list[str], list[Word]]:
        """(binary_args, the rest grouped): words before the first option, then options with their values."""
        leading: list[str] = []
        index = 0
        while index < len(words) and not is_option(words[index]):
            leading.append(words[index])
            index += 1
        if self.flags is not None and leading and not (leading[0] in SUBCOMMANDS and self.binary.endswith("llama")):
            raise UsageError(f"{self.where}: {self.binary} is given {leading[0]!r} before its options; llama-server "
                             f"takes no such word and would stop with 'error: invalid argument: {leading[0]}' "
                             "(a placeholder an installer fills in?); fix the unit, then import")
        if self.flags is not None and len(leading) > 1:
            raise UsageError(f"{self.where}: {self.binary} {leading[0]} is given {leading[1]!r} before its options; "
                             f"it would stop with 'error: invalid argument: {leading[1]}'; fix the unit, then import")
        grouped: list[Word] = []
        while index < len(words):
            word = words[index]
            if not is_option(word):
                if self.flags is not None:
                    raise UsageError(f"{self.where}: {word!r} follows the options of {self.binary} without being an "
                                     f"option's value; llama-server would stop with 'error: invalid argument: {word}' "
                                     "(a placeholder an installer fills in?); fix the unit, then import")
                grouped.append(Word(tuple(words[index:])))  # a wrapper's own word: it and what follows stay put
                break
            head, equals, inline = word.partition("=")
            if equals and word.startswith("--"):
                grouped.append(Word((word,), option_name(head), inline))
                index += 1
                continue
            name = option_name(word)
            following = words[index + 1] if index + 1 < len(words) else None
            takes = self._takes_value(name, following)
            if takes and following is None:
                raise UsageError(f"{self.where}: {word} takes a value and is the last word; llama-server would stop "
                                 f"with 'expected value for argument'{self._cause(word)}; fix the unit, then import")
            if takes and following is not None and is_option(following) and name in BY_FLAG:
                raise UsageError(f"{self.where}: {word} takes a value in {self.binary} and is followed by "
                                 f"{following}, which llama-server would take as that value{self._cause(word)}; "
                                 f"write {word}'s value (e.g. {word} on), then import")
            if takes:
                grouped.append(Word((word, following or ""), name, following))
                index += 2
            elif takes is None and following is not None and not is_option(following):
                grouped.append(Word((word, following), name, None))  # unknown arity: both kept as written
                index += 2
            else:
                grouped.append(Word((word,), name, None))
                index += 1
        return leading, grouped

    def _cause(self, flag: str) -> str:
        cause = self.empty_cause(flag)
        return f" ({cause})" if cause else ""


def _target(name: str | None) -> ProfileKey | None:
    key = BY_FLAG.get(name or "")
    return key if key is not None and key.flags else None


def resolve_repeats(grouped: list[Word], mapping: Mapping) -> list[Word]:
    """llama-server keeps the last value of an option given twice (and warns); `--spec-type` adds up.
    For the keys specd types, the earlier ones are dropped and said so; other options stay as written
    (the server gets them as before)."""
    last: dict[str, int] = {}
    for index, item in enumerate(grouped):
        key = _target(item.name)
        if key is not None and key.kind is not bool:
            last.setdefault(key.name, index)
            last[key.name] = index
    kept: list[Word] = []
    for index, item in enumerate(grouped):
        key = _target(item.name)
        if key is None or key.kind is bool or last[key.name] == index:
            kept.append(item)
            continue
        if key.name == "type":
            later = grouped[last[key.name]]
            grouped[last[key.name]] = Word(later.words, later.name, f"{item.value},{later.value}")
            mapping.row(item.text, "--spec-type given again: llama-server adds the types up; speculative.type "
                                   f"lists them all ({grouped[last[key.name]].value})")
            continue
        final = grouped[last[key.name]]
        earlier = "…" if key.name in SECRET else item.value
        last_value = "…" if key.name in SECRET else final.value
        mapping.row(item.text, f"dropped: {item.name} is given again later ({final.words[0]} {last_value}); "
                               f"llama-server takes the last value, not {earlier}")
    return kept


def map_words(grouped: list[Word], mapping: Mapping) -> None:
    """Typed keys for the options specd knows with values it checks; everything else to args, in order.
    A switch whose negation is given too (`--jinja ... --no-jinja`) stays as written: the order decides."""
    names = {item.name for item in grouped if item.name}
    for item in grouped:
        key = _target(item.name)
        if key is not None and key.kind is bool and any(f"--no-{f.removeprefix('--')}" in names for f in key.flags):
            key = None
        if item.name is None or key is None:
            mapping.rest += item.words
            mapping.row(item.text, "args (kept as written, in place)" if item.name is None else "args")
            continue
        table, schema, prefix = ((mapping.speculative, SPECULATIVE_SCHEMA, "speculative.")
                                 if key.table == "speculative" else (mapping.data, PROFILE_SCHEMA, ""))
        if key.kind is bool:
            if item.value is not None:  # a build whose --help gives this switch a value
                mapping.rest += item.words
                mapping.row(item.text, "args (kept as written: this build gives it a value)")
                continue
            table[key.name] = True
            mapping.row(item.text, f"{prefix}{key.name} = true")
            if key.table == "speculative":
                mapping.speculative_words.append(item.words)
            continue
        if item.value is None:  # value or switch, undecidable here: as written
            mapping.rest += item.words
            mapping.row(item.text, "args (kept as written: a switch in some builds, takes a value in others; "
                                   "the binary decides)")
            continue
        value = _spec_type(item.value) if key.name == "type" else convert(item.value, key.kind)
        written = f"{item.words[0]} …" if key.name in SECRET else item.text
        if accepts(schema, key.name, value):
            table[key.name] = value
            mapping.row(written, f"{prefix}{key.name} = {shown(key.name, value)}")
            if key.table == "speculative":
                mapping.speculative_words.append(item.words)
        else:
            mapping.rest += item.words
            mapping.row(written, f"args (kept as written: {item.value!r} is not a value specd checks for "
                                 f"{prefix}{key.name})")


def unspeculative(mapping: Mapping) -> None:
    """Draft settings with nothing to draft (`-ngld 99` with no --spec-type and no draft model): a profile
    without a speculative type renders none of them, so they stay in args as written, which keeps them."""
    if not mapping.speculative or {"type", "draft_model", "draft_hf_repo"} & set(mapping.speculative):
        return
    for words in mapping.speculative_words:
        mapping.rest += words
        mapping.row(" ".join(words), "args (kept as written: no speculative type or draft model here, so specd "
                                     "does not type it)")
    mapping.speculative.clear()
