"""Named fault-injection points for crash-consistency tests.

`SPECD_FAULT=step1,step2` makes specd kill itself with SIGKILL when it reaches one of those
steps — the same as a power cut or `kill -9` at that exact moment. Unset in normal use.
"""

from __future__ import annotations

import os
import signal


def checkpoint(step: str) -> None:
    faults = os.environ.get("SPECD_FAULT", "")
    if faults and step in faults.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
