#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specd contributors
# MIT License (see the repository's pyproject.toml)
from __future__ import annotations

DOCUMENTATION = r"""
module: specd_facts
short_description: Read a box's specd state as facts
version_added: "0.1.0"
description:
  - Sets C(ansible_facts.specd) from C(specd status --json), C(specd profiles --json) and
    C(specd history --json), that is the active profile, health, the tuner's pin and last verdict,
    the last switch that failed or was reverted, the box's identity and GPUs.
  - Changes nothing; an unhealthy deployment is a fact, not a failure.
extends_documentation_fragment:
  - specd.fleet.common
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
author:
  - specd contributors
"""

EXAMPLES = r"""
- name: Read specd's state
  specd.fleet.specd_facts:

- name: Which box runs what
  ansible.builtin.debug:
    msg: "{{ inventory_hostname }}: {{ ansible_facts.specd.active_profile }} ({{ ansible_facts.specd.health }})"
"""

RETURN = r"""
ansible_facts:
  description: Facts under the key C(specd).
  returned: always
  type: complex
  contains:
    specd:
      description: The deployment as specd sees it.
      type: dict
      contains:
        unit:
          description: The llama-server unit.
          type: str
        active_profile:
          description: The profile the unit holds (null when none).
          type: str
        healthy:
          description: The endpoint passed a health check just now.
          type: bool
        health:
          description: The health check's sentence.
          type: str
        generation:
          description: The active history generation.
          type: int
        pin:
          description: The tuner's pin (profile, at) or null.
          type: dict
        last_tune:
          description: The tuner's newest verdict (at, kind, reason, best, switched, estimates) or null.
          type: dict
        last_failure:
          description: The newest switch or rollback that was reverted or failed (a history row), or null.
          type: dict
        profiles:
          description: Every profile with whether it validates and is active.
          type: list
          elements: dict
        gpus:
          description: The box's NVIDIA GPUs (index, name, uuid, total_bytes); empty without one.
          type: list
          elements: dict
        box:
          description: The box's name, hostname, machine id, system and hardware summary.
          type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specd.fleet.plugins.module_utils.specd_cli import COMMON_ARGS, SpecdCli

ARGUMENT_SPEC = dict(**COMMON_ARGS)

FAILED_OUTCOMES = ("reverted", "failed")


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    cli = SpecdCli(module)
    facts = cli.status()
    facts["profiles"] = list(cli.profiles().values())
    history = cli.document("history", "--limit", "50")[1]
    facts["last_failure"] = next((row for row in history if row.get("outcome") in FAILED_OUTCOMES), None)
    facts["gpus"] = facts.get("box", {}).get("hardware", {}).get("gpus", [])
    module.exit_json(changed=False, ansible_facts=dict(specd=facts))


if __name__ == "__main__":
    main()
