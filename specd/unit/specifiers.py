"""systemd's `%` specifiers (systemd.unit(5), "Specifiers"), resolved as systemd 252 resolves them.

What each one stands for comes from the unit's name and scope (`UnitContext`) and from the box
(`BoxFacts`: host name, machine and boot ID, kernel, os-release). Checked against the real
manager (tests/system/test_specifiers.py): a `%` before a letter or digit that is not in the
table makes systemd refuse the unit (LoadState bad-setting); a `%` before any other character
(`%/`, a trailing `%`) is kept as written, so `%HOME%/x` is the host name, `OME` and `%/x`.
"""

from __future__ import annotations

import grp
import os
import platform
import pwd
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path

from specd.errors import UsageError
from specd.profiles.config import Scope

# systemd's names for `uname -m` (src/basic/architecture.h).
_ARCHITECTURES = {"x86_64": "x86-64", "i386": "x86", "i486": "x86", "i586": "x86", "i686": "x86",
                  "aarch64": "arm64", "aarch64_be": "arm64-be", "armv7l": "arm", "armv6l": "arm",
                  "ppc64le": "ppc64-le", "ppc64": "ppc64", "ppc": "ppc", "s390x": "s390x", "s390": "s390",
                  "riscv64": "riscv64", "riscv32": "riscv32", "mips64": "mips64-le", "loongarch64": "loongarch64"}


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def _key_values(text: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for line in text.splitlines():
        name, equals, value = line.partition("=")
        if equals and not name.startswith("#"):
            pairs.append((name.strip(), value.strip().strip("\"'")))
    return tuple(pairs)


@dataclass(frozen=True)
class BoxFacts:
    """What the box-dependent specifiers stand for, read once from this machine."""

    hostname: str
    machine_id: str
    boot_id: str
    kernel_release: str
    architecture: str
    os_release: tuple[tuple[str, str], ...]
    pretty_hostname: str = ""

    @classmethod
    def here(cls) -> BoxFacts:
        os_release = _read("/etc/os-release") or _read("/usr/lib/os-release")
        machine_info = dict(_key_values(_read("/etc/machine-info")))
        return cls(socket.gethostname(), _read("/etc/machine-id"),
                   _read("/proc/sys/kernel/random/boot_id").replace("-", ""), platform.release(),
                   _ARCHITECTURES.get(platform.machine(), platform.machine()), _key_values(os_release),
                   machine_info.get("PRETTY_HOSTNAME", ""))

    def os(self, name: str) -> str:
        return dict(self.os_release).get(name, "")


@dataclass(frozen=True)
class UnitContext:
    """What specifiers resolve against: the unit's own name and file, the manager that runs it, the box."""

    unit_name: str
    scope: Scope = "user"
    home: str = field(default_factory=lambda: str(Path.home()))
    user: str = field(default_factory=lambda: pwd.getpwuid(os.getuid()).pw_name)
    uid: int = field(default_factory=os.getuid)
    fragment: str = ""  # the unit file's path (%y, %Y)
    box: BoxFacts = field(default_factory=BoxFacts.here)

    @classmethod
    def for_unit(cls, unit_name: str, scope: Scope, fragment: str = "") -> UnitContext:
        if scope == "system":  # the system manager runs as root: %h is /root, %u root
            return cls(unit_name, scope, home="/root", user="root", uid=0, fragment=fragment)
        return cls(unit_name, scope, fragment=fragment)

    @property
    def prefix(self) -> str:
        stem = self.unit_name.rsplit(".", 1)[0]
        return stem.split("@", 1)[0]

    @property
    def instance(self) -> str:
        stem = self.unit_name.rsplit(".", 1)[0]
        return stem.split("@", 1)[1] if "@" in stem else ""

    @property
    def is_template(self) -> bool:
        """A template's own file loaded without an instance (`name@.service`): %i has no value yet."""
        return "@" in self.unit_name and not self.instance

    def directory(self, kind: str) -> str:
        """%t %S %C %E %L. For a user manager, systemd 252 puts %S at $XDG_CONFIG_HOME and %L under it
        (systemd.unit(5) of 252 says so, and the real manager does it)."""
        if self.scope == "system":
            return {"t": "/run", "S": "/var/lib", "C": "/var/cache", "E": "/etc", "L": "/var/log"}[kind]
        if kind == "t":
            return os.environ.get("XDG_RUNTIME_DIR", f"/run/user/{self.uid}")
        config = f"{self.home}/.config"
        return {"S": config, "C": f"{self.home}/.cache", "E": config, "L": f"{config}/log"}[kind]

    def _temporary(self, fallback: str) -> str:
        if self.scope == "system":
            return fallback
        return next((os.environ[name] for name in ("TMPDIR", "TEMP", "TMP") if os.environ.get(name)), fallback)

    def _group(self) -> tuple[str, str]:
        if self.scope == "system":
            return "root", "0"
        gid = pwd.getpwnam(self.user).pw_gid if _user_exists(self.user) else os.getgid()
        try:
            return grp.getgrgid(gid).gr_name, str(gid)
        except KeyError:
            return str(gid), str(gid)

    def _shell(self) -> str:
        if self.scope == "system" or not _user_exists(self.user):
            return "/bin/sh"
        return pwd.getpwnam(self.user).pw_shell or "/bin/sh"

    def specifier(self, code: str) -> str | None:
        """What `%code` stands for; None for a letter or digit systemd does not know (it refuses the unit)."""
        names = {"%": "%", "n": self.unit_name, "N": self.unit_name.rsplit(".", 1)[0], "p": self.prefix,
                 "P": unescape_name(self.prefix), "i": self.instance, "I": unescape_name(self.instance),
                 "j": self.prefix.rsplit("-", 1)[-1], "J": unescape_name(self.prefix.rsplit("-", 1)[-1]),
                 "f": "/" + unescape_name(self.instance or self.prefix).lstrip("/"),
                 "h": self.home, "u": self.user, "U": str(self.uid)}
        if code in names:
            return names[code]
        if code in "tSCEL":
            return self.directory(code)
        box = self.box
        facts = {"H": box.hostname, "l": box.hostname.split(".", 1)[0], "m": box.machine_id, "b": box.boot_id,
                 "v": box.kernel_release, "a": box.architecture, "o": box.os("ID"), "w": box.os("VERSION_ID"),
                 "W": box.os("VARIANT_ID"), "A": box.os("IMAGE_VERSION"), "B": box.os("BUILD_ID"),
                 "M": box.os("IMAGE_ID"), "q": box.pretty_hostname or box.hostname.split(".", 1)[0],
                 "T": self._temporary("/tmp"), "V": self._temporary("/var/tmp"),
                 "y": self.fragment, "Y": os.path.dirname(self.fragment),
                 "d": f"{self.directory('t')}/credentials/{self.unit_name}"}
        if code in facts:
            return facts[code]
        if code in "gG":
            return self._group()[0 if code == "g" else 1]
        if code == "s":
            return self._shell()
        return None


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def unescape_name(text: str) -> str:
    """systemd-escape's inverse for %I and %P: `-` is `/`, `\\xHH` a byte."""
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), text.replace("-", "/"))


SPECIFIER_MEANINGS = {
    "a": "the architecture", "A": "the OS image version (os-release IMAGE_VERSION)", "b": "the boot ID",
    "B": "the OS build ID (os-release BUILD_ID)", "C": "the cache directory", "d": "the credentials directory",
    "E": "the configuration directory", "f": "the unescaped instance or prefix with / in front",
    "g": "the manager's group", "G": "the manager's group id", "h": "the home directory of the manager's user",
    "H": "the host name", "i": "the unit's instance", "I": "the unit's instance, unescaped",
    "j": "the last part of the prefix", "J": "the last part of the prefix, unescaped", "l": "the short host name",
    "L": "the log directory", "m": "the machine ID", "M": "the OS image identifier (os-release IMAGE_ID)",
    "n": "the unit's full name", "N": "the unit's name without its type", "o": "the OS identifier (os-release ID)",
    "p": "the unit's prefix", "P": "the unit's prefix, unescaped", "q": "the pretty host name",
    "s": "the manager's user's shell", "S": "the state directory", "t": "the runtime directory",
    "T": "the directory for temporary files", "u": "the manager's user", "U": "the manager's user id",
    "v": "the kernel release", "V": "the directory for larger temporary files",
    "w": "the OS version (os-release VERSION_ID)", "W": "the OS variant (os-release VARIANT_ID)",
    "y": "the unit file's path", "Y": "the unit file's directory",
}
# Resolved from the box at the moment of import: the profile keeps the value, so it must not change.
_CHANGES = {"b": "the boot ID changes at every boot"}
_INSTANCE = frozenset("iIf")
_SPECIFIER = re.compile(r"%(.)", re.DOTALL)


def specifiers_in(text: str) -> set[str]:
    """The specifier codes `text` uses (%% and a % before a non-alphanumeric are not ones)."""
    return {code for code in _SPECIFIER.findall(text) if code.isascii() and code.isalnum()}


def resolve_specifiers(text: str, context: UnitContext, where: str) -> str:
    """Replace %X specifiers as systemd does; a letter or digit it does not know is refused as systemd
    refuses it, naming the specifier and, for an instance specifier in a template's own file, the fix."""
    def replace(match: re.Match[str]) -> str:
        code = match.group(1)
        if not (code.isascii() and code.isalnum()) and code != "%":
            return match.group(0)  # systemd keeps `%/`, `%.`, `%-` as written
        if code in _INSTANCE and context.is_template:
            raise UsageError(f"{where}: %{code} ({SPECIFIER_MEANINGS[code]}) has no value in the template "
                             f"{context.unit_name} itself: import an instance of it, "
                             f"--from {context.prefix}@INSTANCE.{context.unit_name.rsplit('.', 1)[-1]}")
        if code in _CHANGES:
            raise UsageError(f"{where}: %{code} in {text[:80]!r}: {_CHANGES[code]}, so a profile cannot keep "
                             "what it stands for; write the value the server needs instead")
        value = context.specifier(code)
        if value is None:
            raise UsageError(f"{where}: %{code} in {text[:80]!r} is not a systemd specifier, so systemd refuses "
                             f"the unit (write %%{code} for a literal %{code}); systemd.unit(5) lists "
                             f"%{', %'.join(sorted(SPECIFIER_MEANINGS, key=str.lower))}")
        return value

    return _SPECIFIER.sub(replace, text)


_NAME_SPECIFIERS = frozenset("nNpPiIjJf")


def resolve_name_specifiers(text: str, context: UnitContext) -> str:
    """Resolve only the specifiers that name the unit (%n %N %p %P %i %I %j %J %f): a directive carried
    into a unit of another name must keep meaning what it meant; %h, %t, %H, %% ... stay for systemd."""
    def replace(match: re.Match[str]) -> str:
        code = match.group(1)
        if code in _NAME_SPECIFIERS:
            return (context.specifier(code) or "").replace("%", "%%")
        return match.group(0)

    return _SPECIFIER.sub(replace, text)
