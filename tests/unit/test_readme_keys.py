"""The README's table of profile keys is the one the key registry prints: docs cannot drift."""

from __future__ import annotations

from pathlib import Path

from specd.profiles.config import CONFIG_SCHEMA, config_key_table
from specd.profiles.keys import key_table

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_lists_every_profile_key_as_the_registry_defines_it() -> None:
    assert key_table() in README.read_text(), (
        "README.md's key table is stale: paste the output of "
        "`python -c 'from specd.profiles.keys import key_table; print(key_table())'`")


def test_the_readme_lists_every_config_key_with_its_meaning_and_default() -> None:
    documented = [key for key in CONFIG_SCHEMA.keys.values()] + [
        key for table in CONFIG_SCHEMA.tables.values() for key in table.keys.values()]
    assert documented and all(key.doc for key in documented)
    assert config_key_table() in README.read_text(), "README.md's specd.toml table is stale"
