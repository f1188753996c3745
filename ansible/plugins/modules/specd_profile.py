#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: specd contributors
# MIT License (see the repository's pyproject.toml)
from __future__ import annotations

DOCUMENTATION = r"""
module: specd_profile
short_description: Ensure a specd profile file holds the given TOML
version_added: "0.1.0"
description:
  - Writes C(<profiles_dir>/<name>.toml) on the managed box, or removes it.
  - C(changed) is reported only when the TOML really changed, that is when the parsed document
    differs from the parsed file on the box. specd reads a profile's values, never its bytes, so a
    file whose comments, key order, quoting or whitespace differ from I(content) holds the same profile;
    rewriting it would report a change on every run (templates rarely reproduce a file byte for
    byte) and would make the specd daemon's watcher re-validate a profile that did not change.
    Such a file is left as it is.
  - After writing, the profile is validated with C(specd profiles --json); a profile specd rejects
    is put back as it was (or removed, when it is new) and the task fails with specd's message,
    naming the file, line and key.
  - Supports check mode and diff mode.
options:
  name:
    description:
      - The profile's name (the file name without C(.toml)).
    type: str
    required: true
  content:
    description:
      - The profile as TOML text. Required with I(state=present).
    type: str
  state:
    description:
      - C(present) writes the file, C(absent) removes it (refused while the profile is active).
    type: str
    choices: [present, absent]
    default: present
  profiles_dir:
    description:
      - The directory of profile files.
      - Default is the deployment's C(profiles_dir), as C(specd status --json) reports it.
    type: path
  validate:
    description:
      - Check the written profile with C(specd profiles --json) and restore the old file when specd rejects it.
    type: bool
    default: true
extends_documentation_fragment:
  - specd.fleet.common
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
author:
  - specd contributors
"""

EXAMPLES = r"""
- name: Ship the MTP profile
  specd.fleet.specd_profile:
    name: mtp
    content: |
      inherits = "base"
      description = "MTP heads, p_min filter"
      [speculative]
      type = "mtp"
      draft_n_max = 6

- name: Ship a profile from a template
  specd.fleet.specd_profile:
    name: dflash
    content: "{{ lookup('ansible.builtin.template', 'dflash.toml.j2') }}"
"""

RETURN = r"""
path:
  description: The profile file.
  returned: always
  type: str
  sample: /home/llama/.config/specd/profiles/mtp.toml
reason:
  description: Why the task changed the file or not.
  returned: always
  type: str
  sample: same TOML as the file on the box (only formatting or comments differ); file left as it is
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specd.fleet.plugins.module_utils.specd_cli import COMMON_ARGS, SpecdCli

ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    content=dict(type="str"),
    state=dict(type="str", default="present", choices=["present", "absent"]),
    profiles_dir=dict(type="path"),
    validate=dict(type="bool", default=True),
    **COMMON_ARGS
)

try:
    import tomllib
except ImportError:  # Python < 3.11 on the managed box
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ImportError:
        tomllib = None


def parse(module, text, where):
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        module.fail_json(msg="%s is not valid TOML: %s" % (where, exc))


def read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def write_atomically(path, text):
    """A temp file beside the target (not named *.toml, so specd's watcher ignores it), fsync, rename."""
    directory = os.path.dirname(path)
    mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o644
    handle, temp = tempfile.mkstemp(dir=directory, prefix=".", suffix=".ansible-tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def validate(module, cli, name, path, before):
    """specd's verdict on the written profile; on rejection put the old file back and fail."""
    entry = cli.profiles().get(name)
    error = entry.get("error") if entry else "specd does not list it"
    if not error:
        return
    if before is None:
        os.unlink(path)
        undone = "the new file was removed"
    else:
        write_atomically(path, before)
        undone = "the previous file was put back"
    module.fail_json(msg="profile %s is rejected by specd: %s (%s)" % (name, error, undone), path=path)


def ensure_present(module, cli, name, path, before):
    content = module.params["content"]
    if content is None:
        module.fail_json(msg="content is required with state=present")
    wanted = parse(module, content, "content of profile %s" % name)
    if before is not None:
        try:
            same = tomllib.loads(before) == wanted
        except tomllib.TOMLDecodeError:
            same = False
        if same:
            reason = ("same TOML as the file on the box" if before == content else
                      "same TOML as the file on the box (only formatting or comments differ); file left as it is")
            return False, reason
    if not module.check_mode:
        write_atomically(path, content)
        if module.params["validate"]:
            validate(module, cli, name, path, before)
    return True, "new profile file" if before is None else "the TOML differs"


def ensure_absent(module, cli, name, path, before):
    if before is None:
        return False, "no such profile file"
    entry = cli.profiles().get(name)
    if entry and entry.get("active"):
        module.fail_json(msg="profile %s is active; switch to another profile before removing it" % name, path=path)
    if not module.check_mode:
        os.unlink(path)
    return True, "profile file removed"


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("state", "present", ("content",))],
        supports_check_mode=True,
    )
    if tomllib is None:
        module.fail_json(msg="specd_profile needs Python 3.11+ (tomllib) or the tomli package on the managed box")
    name = module.params["name"]
    if not name or "/" in name or name.startswith(".") or name.endswith(".toml"):
        module.fail_json(msg="name %r: give the profile's name, without a directory or .toml" % name)
    cli = SpecdCli(module)
    profiles_dir = module.params["profiles_dir"] or cli.status()["profiles_dir"]
    if not os.path.isdir(profiles_dir):
        module.fail_json(msg="profiles_dir %s is not a directory" % profiles_dir)
    path = os.path.join(profiles_dir, name + ".toml")
    before = read(path)
    if module.params["state"] == "present":
        changed, reason = ensure_present(module, cli, name, path, before)
        after = module.params["content"] if changed else before
    else:
        changed, reason = ensure_absent(module, cli, name, path, before)
        after = None
    result = dict(changed=changed, path=path, reason=reason)
    if module._diff:
        result["diff"] = dict(before=before or "", after=after or "", before_header=path, after_header=path)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
