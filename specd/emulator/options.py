"""The llama-server flags specd-emulator accepts, as data (data/emulator/options.toml), and its --help
printed in llama-server's layout, so specd's flag check reads it as it reads the real server's."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass

from specd.emulator.model import DATA_DIR

OPTIONS_FILE = DATA_DIR / "options.toml"


@dataclass(frozen=True)
class Option:
    section: str
    names: tuple[str, ...]
    hint: str  # argument placeholder; empty for a switch
    help: str

    @property
    def canonical(self) -> str:
        return next((n for n in self.names if n.startswith("--")), self.names[0])


def load_options() -> tuple[Option, ...]:
    """The llama-server flags the emulator accepts, as data so --help and parsing share one list."""
    raw = tomllib.loads(OPTIONS_FILE.read_text(encoding="utf-8"))
    return tuple(Option(o["section"], tuple(n.strip() for n in o["names"].split(",")), o.get("hint", ""),
                        o["help"]) for o in raw["option"])


OPTIONS = load_options()
OPTIONS_BY_NAME = {name: option for option in OPTIONS for name in option.names}


def format_option(option: Option) -> str:
    """llama-server's common_arg::to_string layout: names, placeholder, description from column 40."""
    names = option.names
    head = names[0] if len(names) == 1 else (names[0] + ", ").ljust(7) + ", ".join(names[1:])
    head += f" {option.hint}" if option.hint else ""
    head = head + "\n" + " " * 40 if len(head) > 37 else head.ljust(40)
    lines, line = [], ""
    for word in option.help.split():
        if line and len(line) + 1 + len(word) > 70:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return head + ("\n" + " " * 40).join(lines) + "\n"


def help_text() -> str:
    out = ["specd-emulator: a llama-server performance emulator, not a real server.\n"]
    section = ""
    for option in OPTIONS:
        if option.section != section:
            section = option.section
            out.append(f"\n----- {section} params -----\n\n")
        out.append(format_option(option))
    return "".join(out)
