"""Every test under tests/system is marked `system`: it runs against a private systemd --user and/or
the real llama-server (`pytest -m "not system"` runs the fast tier alone)."""

from __future__ import annotations

import pytest

from tests.system.daemon_rig import start_daemon  # noqa: F401  (a fixture for the daemon tests)
from tests.system.fault_results import fault_results  # noqa: F401  (the fault tests' measured bounds)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/system/" in str(item.path):
            item.add_marker(pytest.mark.system)
