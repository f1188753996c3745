#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specd contributors
# MIT License (see the repository's pyproject.toml)
from __future__ import annotations

DOCUMENTATION = r"""
module: specd_switch
short_description: Make a specd profile the active, healthy one (health-gated, self-reverting)
version_added: "0.1.0"
description:
  - Runs C(specd switch PROFILE --json) on the managed box. specd renders the profile into the
    llama-server unit, restarts it and health-gates the alias; when the new server does not come up
    healthy specd puts the previous unit back by itself, and this task fails with the revert's outcome.
  - Idempotent. When the unit already holds what the profile renders to and runs, nothing is
    restarted and the task reports C(changed=false), after C(specd status --json) confirms the
    endpoint is healthy (an active but unhealthy profile fails the task instead of passing silently).
  - In check mode, C(specd diff PROFILE --json) and C(specd status --json) say whether a switch
    would happen; preflight runs, so a profile that cannot run on the box fails the check.
options:
  profile:
    description:
      - The profile to make active (a file in the deployment's profiles_dir, without C(.toml)).
    type: str
    required: true
extends_documentation_fragment:
  - specd.fleet.common
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - specd contributors
"""

EXAMPLES = r"""
- name: Switch to the MTP profile; stop here when its gate fails (the box reverted itself)
  specd.fleet.specd_switch:
    profile: mtp
  register: switched

- name: Show the gate's timings
  ansible.builtin.debug:
    msg: "generation {{ switched.generation }}: loaded in {{ switched.gate.load_s }} s"
  when: switched is changed
"""

RETURN = r"""
active_profile:
  description: The profile the unit holds after the task (the previous one after a revert).
  returned: always
  type: str
  sample: mtp
generation:
  description: The history generation now active (or, on failure, the failed one).
  returned: when specd recorded one
  type: int
  sample: 12
generation_record:
  description: The whole history row of that generation (outcome, detail, trigger, timings).
  returned: when specd recorded one
  type: dict
gate:
  description: The health gate of the new server; null when nothing was restarted (and in check mode).
  returned: success
  type: dict
  contains:
    ok:
      description: The gate passed.
      type: bool
    load_s:
      description: Seconds from the restart until /health answered 200.
      type: float
    total_s:
      description: Seconds of the whole gate, stability window included.
      type: float
    detail:
      description: What the gate saw.
      type: str
timings:
  description: Seconds per step of the switch (preflight_s, restart_s, health_s, total_s).
  returned: when changed or failed after the intent was recorded
  type: dict
revert:
  description: >-
    On failure, how specd's automatic revert went: outcome C(reverted) (the previous unit is back
    and healthy) or C(failed), the sentence on the state reached, and the unit's last journal lines.
  returned: failed after specd started the switch
  type: dict
notes:
  description: specd's notes (preflight findings, "already on profile ...").
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specd.fleet.plugins.module_utils.specd_cli import COMMON_ARGS, SpecdCli

ARGUMENT_SPEC = dict(profile=dict(type="str", required=True), **COMMON_ARGS)

TIMING_KEYS = ("preflight_s", "restart_s", "health_s", "total_s")


def timings_of(record):
    return dict((key, record.get(key)) for key in TIMING_KEYS) if record else None


def check(module, cli, profile):
    if profile not in cli.profiles():
        module.exit_json(changed=True, active_profile=cli.status().get("active_profile"), gate=None, notes=[
            "profile %s is not on the box yet (check mode: an earlier task would write it)" % profile])
    diff = cli.document("diff", profile)[1]
    status = cli.status()
    running_healthy = bool(status.get("healthy")) and status.get("active_profile") == profile
    module.exit_json(changed=bool(diff["differs"]) or not running_healthy, gate=None,
                     active_profile=status.get("active_profile"), notes=list(diff.get("notes") or []))


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    profile = module.params["profile"]
    cli = SpecdCli(module)
    if module.check_mode:
        check(module, cli, profile)
    rc, data, err = cli.document("switch", profile, ok_codes=(0, 1, 2, 75))
    record = data.get("generation")
    result = dict(
        active_profile=data.get("active_profile"),
        generation=record.get("id") if record else None,
        generation_record=record,
        timings=timings_of(record),
        notes=data.get("notes") or [],
    )
    if not data.get("ok"):
        revert = data.get("revert")
        module.fail_json(msg=data.get("error") or err.strip(), rc=rc, revert=revert,
                         changed=bool(revert and revert.get("outcome") == "failed"), **result)
    if not data["changed"]:
        status = cli.status()
        if not status.get("healthy"):
            module.fail_json(msg="%s already holds profile %s, but it is not healthy: %s (see `specd status`)"
                             % (data.get("unit"), profile, status.get("health")), **result)
    module.exit_json(changed=bool(data["changed"]), gate=data.get("gate"), **result)


if __name__ == "__main__":
    main()
