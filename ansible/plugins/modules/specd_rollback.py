#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specd contributors
# MIT License (see the repository's pyproject.toml)
from __future__ import annotations

DOCUMENTATION = r"""
module: specd_rollback
short_description: Step a specd deployment back to the unit it ran before (health-gated)
version_added: "0.1.0"
description:
  - Runs C(specd rollback --json) on the managed box. The unit as it was before the last change is
    put back, restarted and health-gated; if that fails, specd reverts to where it was.
  - With I(away_from), only boxes whose active profile is that profile are rolled back, so the
    task is idempotent (a second run finds the profile no longer active and changes nothing). Without
    I(away_from) or I(to_generation) every run steps back once more, as C(specd rollback) does.
options:
  away_from:
    description:
      - Roll back only when this profile is the active one (the profile a rollout installed).
    type: str
  to_generation:
    description:
      - Jump to this generation (C(specd rollback --to)); see C(specd history). Unchanged when it is already active.
    type: int
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
- name: Undo the MTP rollout on the boxes that run it
  specd.fleet.specd_rollback:
    away_from: mtp
"""

RETURN = r"""
active_profile:
  description: The profile the unit holds after the task.
  returned: always
  type: str
generation:
  description: The generation now active (or, on failure, the failed one).
  returned: when specd recorded one
  type: int
gate:
  description: The health gate of the restored server (ok, load_s, total_s, detail).
  returned: when changed
  type: dict
revert:
  description: On failure, how specd's automatic revert went (outcome, state, journal).
  returned: failed after specd started the rollback
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specd.fleet.plugins.module_utils.specd_cli import COMMON_ARGS, SpecdCli

ARGUMENT_SPEC = dict(away_from=dict(type="str"), to_generation=dict(type="int"), **COMMON_ARGS)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        mutually_exclusive=[("away_from", "to_generation")],
        supports_check_mode=True,
    )
    cli = SpecdCli(module)
    status = cli.status()
    active = status.get("active_profile")
    away_from = module.params["away_from"]
    to_generation = module.params["to_generation"]
    if away_from is not None and active != away_from:
        module.exit_json(changed=False, active_profile=active, generation=status.get("generation"),
                         msg="%s is not active (active: %s); nothing to undo" % (away_from, active))
    if to_generation is not None and status.get("generation") == to_generation:
        module.exit_json(changed=False, active_profile=active, generation=to_generation,
                         msg="generation %d is already active" % to_generation)
    if module.check_mode:
        module.exit_json(changed=True, active_profile=active, generation=status.get("generation"))
    args = ["rollback"] + (["--to", str(to_generation)] if to_generation is not None else [])
    rc, data, err = cli.document(*args, ok_codes=(0, 1, 2, 75))
    record = data.get("generation")
    result = dict(active_profile=data.get("active_profile"), generation=record.get("id") if record else None,
                  generation_record=record)
    if not data.get("ok"):
        revert = data.get("revert")
        module.fail_json(msg=data.get("error") or err.strip(), rc=rc, revert=revert,
                         changed=bool(revert and revert.get("outcome") == "failed"), **result)
    module.exit_json(changed=bool(data["changed"]), gate=data.get("gate"), **result)


if __name__ == "__main__":
    main()
