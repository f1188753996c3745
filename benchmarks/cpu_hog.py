"""A defined CPU load for loaded test runs: one process busy 50 ms of every 100 ms (half of one
core) until it is killed. Used by benchmarks/loaded_suite.sh."""

import time

while True:
    started = time.monotonic()
    while time.monotonic() - started < 0.05:
        pass
    time.sleep(0.05)
