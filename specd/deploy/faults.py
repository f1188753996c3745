"""Named fault-injection points for crash-consistency and interruption tests.

`SPECD_FAULT=step1,step2` makes specd kill itself with SIGKILL when it reaches one of those
steps — the same as a power cut or `kill -9` at that exact moment. `step:INT` or `step:TERM`
sends that signal instead: Ctrl-C, or a `systemctl stop`/`kill` of the CLI, at that exact moment
(the process handles it as it would from outside). Unset in normal use.
"""

from __future__ import annotations

import os
import signal

_SIGNALS = {"": signal.SIGKILL, "KILL": signal.SIGKILL, "INT": signal.SIGINT, "TERM": signal.SIGTERM}


def checkpoint(step: str) -> None:
    faults = os.environ.get("SPECD_FAULT", "")
    for fault in faults.split(",") if faults else ():
        name, _, how = fault.partition(":")
        if name == step and how in _SIGNALS:
            os.kill(os.getpid(), _SIGNALS[how])
