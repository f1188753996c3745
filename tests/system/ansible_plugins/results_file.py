"""An Ansible callback that appends every task result to $SPECD_TEST_RESULTS as one JSON line
({"host", "task", "status", "changed", "result"}), so tests assert on what each module returned
instead of reading the human output. Test harness only (enabled through ANSIBLE_CALLBACKS_ENABLED)."""

from __future__ import annotations

import json
import os

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "results_file"
    CALLBACK_NEEDS_ENABLED = True

    def _write(self, result, status):
        # ansible-core 2.19 names them host/task/result; older releases only _host/_task/_result
        host = getattr(result, "host", None) or result._host
        task = getattr(result, "task", None) or result._task
        data = dict(getattr(result, "result", None) or result._result)
        record = {"host": host.get_name(), "task": task.get_name(), "status": status,
                  "changed": bool(data.get("changed")), "result": data}
        with open(os.environ["SPECD_TEST_RESULTS"], "a", encoding="utf-8") as out:
            out.write(json.dumps(record, default=str) + "\n")

    def v2_runner_on_ok(self, result):
        self._write(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._write(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._write(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._write(result, "unreachable")
