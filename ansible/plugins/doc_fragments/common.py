# -*- coding: utf-8 -*-
# Copyright: specd contributors
# MIT License (see the repository's pyproject.toml)
from __future__ import annotations


class ModuleDocFragment(object):

    # Options every specd module takes: which specd, which specd.toml, which deployment.
    DOCUMENTATION = r"""
options:
  executable:
    description:
      - The C(specd) command on the managed box.
      - Default is C(specd) found on the PATH (the M(ansible.builtin.command) PATH of the task's environment).
    type: path
  config:
    description:
      - The C(specd.toml) to use (C(--config)).
      - Default is specd's own lookup, C($SPECD_CONFIG), then C($XDG_CONFIG_HOME/specd/specd.toml).
    type: path
  unit:
    description:
      - Which configured deployment (C(--unit)), when C(specd.toml) has several.
    type: str
requirements:
  - specd on the managed box (the M(specd.fleet.specd_install) role installs it)
notes:
  - The modules call C(specd ... --json) and read its documented JSON (C(docs/json.md) in the specd repository);
    they never parse human output.
  - specd drives the C(systemd --user) manager of the user the task runs as; with C(become) set
    C(XDG_RUNTIME_DIR) in the task's C(environment) so C(systemctl --user) finds that manager.
"""
