# -*- coding: utf-8 -*-
# Copyright: specd contributors
# MIT License (see the repository's pyproject.toml)
"""Running specd's CLI with --json from a module: one place that builds the command line and
turns specd's exit codes and documents into results or clear failures."""

from __future__ import annotations

import json

# The options of plugins/doc_fragments/common.py, for every module's argument_spec.
COMMON_ARGS = dict(
    executable=dict(type="path"),
    config=dict(type="path"),
    unit=dict(type="str"),
)

# specd's exit codes (specd/errors.py): 0 ok, 1 an operation failed, 2 bad input (nothing changed),
# 3 `status` found the deployment unhealthy, 75 another specd operation holds the lock.
EXIT_OK = 0
EXIT_UNHEALTHY = 3


class SpecdCli(object):
    """specd on the managed box, with the module's --config/--unit applied to every call."""

    def __init__(self, module):
        self.module = module
        self.executable = module.params.get("executable") or module.get_bin_path("specd", required=True)
        self.selection = []
        if module.params.get("config"):
            self.selection += ["--config", module.params["config"]]
        if module.params.get("unit"):
            self.selection += ["--unit", module.params["unit"]]

    def run(self, *args):
        """(rc, stdout, stderr) of `specd ARGS --config .. --unit .. --json`."""
        command = [self.executable] + list(args) + self.selection + ["--json"]
        return self.module.run_command(command, check_rc=False)

    def document(self, *args, **kwargs):
        """The JSON document `specd ARGS --json` printed, or fail the task saying why there is none.

        ok_codes: exit codes after which a document is expected (others fail the task with specd's
        own message from stderr).
        """
        ok_codes = kwargs.get("ok_codes", (EXIT_OK,))
        rc, out, err = self.run(*args)
        what = "specd " + " ".join(args)
        if rc not in ok_codes and not out.strip():
            self.module.fail_json(msg="%s failed (exit %d): %s" % (what, rc, err.strip()), rc=rc, stderr=err)
        try:
            data = json.loads(out)
        except ValueError:
            self.module.fail_json(msg="%s printed no JSON document (exit %d): %s" % (what, rc, err.strip()),
                                  rc=rc, stdout=out, stderr=err)
        return rc, data, err

    def status(self):
        """`specd status --json`: exit 3 (not healthy) still carries the whole document."""
        return self.document("status", ok_codes=(EXIT_OK, EXIT_UNHEALTHY))[1]

    def profiles(self):
        """{name: entry} from `specd profiles --json`."""
        listing = self.document("profiles")[1]
        return dict((entry["name"], entry) for entry in listing)
