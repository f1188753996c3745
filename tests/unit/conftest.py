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
