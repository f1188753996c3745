"""tests/unit needs no systemd and no llama-server build: a test here that asks for the system
tier's fixtures fails at setup, so the tier stays fast and runs anywhere."""

from __future__ import annotations

import pytest

SYSTEM_FIXTURES = frozenset({"box", "real_server", "systemd_manager"})


def pytest_runtest_setup(item: pytest.Item) -> None:
    used = SYSTEM_FIXTURES & set(getattr(item, "fixturenames", ()))
    if used:
        pytest.fail(f"{item.nodeid} is in tests/unit but uses {', '.join(sorted(used))}: move it to tests/system",
                    pytrace=False)


@pytest.fixture(autouse=True)
def private_user_config(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit test never writes into the real user's ~/.config (systemd/user units, specd.toml): each
    test gets a config home of its own unless it sets one itself."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config-home")))
