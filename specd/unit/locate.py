"""Where a unit's files are: `--from NAME` looked up in the scope's unit directories (a template
instance read from its template), and its drop-ins in the order systemd applies them."""

from __future__ import annotations

from pathlib import Path

from specd.errors import UsageError


def _unit_directories(scope: str) -> list[Path]:
    from specd import paths

    if scope == "user":
        return [paths.user_unit_dir(), Path("/etc/systemd/user"), Path("/usr/lib/systemd/user")]
    return [paths.SYSTEM_UNIT_DIR, Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")]


def drop_in_files(unit_path: Path, unit_name: str, scope: str) -> list[Path]:
    """`NAME.d/*.conf` (and the template's `NAME@.service.d/`) beside the unit and in the scope's unit
    directories, in systemd's order: by file name, a name in an earlier directory hiding later ones."""
    names = [unit_name]
    if "@" in unit_name:
        stem, _, suffix = unit_name.rpartition(".")
        names.insert(0, stem.split("@", 1)[0] + "@." + suffix)
    by_name: dict[str, Path] = {}
    for directory in [unit_path.parent, *_unit_directories(scope)]:
        for name in names:
            folder = directory / f"{name}.d"
            if folder.is_dir():
                for conf in folder.glob("*.conf"):
                    by_name.setdefault(conf.name, conf)
    return [by_name[name] for name in sorted(by_name)]


def template_of(path: Path) -> Path | None:
    """`dir/name@inst.service` read from `dir/name@.service`, as systemd reads an instance from its template."""
    stem, dot, suffix = path.name.rpartition(".")
    if "@" not in stem or stem.endswith("@"):
        return None
    template = path.with_name(stem.split("@", 1)[0] + "@" + dot + suffix)
    return template if template.is_file() else None


def resolve_source(source: str, scope: str) -> Path:
    """`--from`: a path, or the name of an installed unit (template instances included, also as a path:
    `dir/name@inst.service` is read from `dir/name@.service`)."""
    path = Path(source)
    if path.exists():
        return path
    if "/" in source:
        return template_of(path) or path
    directories = _unit_directories(scope)
    names = [source]
    if "@" in source:  # llama-server@qwen.service is read from llama-server@.service
        stem, _, suffix = source.rpartition(".")
        names.append(stem.split("@", 1)[0] + "@." + suffix)
    for directory in directories:
        for name in names:
            if (directory / name).is_file():
                return directory / name
    raise UsageError(f"no unit file {source} in {', '.join(map(str, directories))}; pass its path to --from")
