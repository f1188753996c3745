"""Units: render a profile into a systemd unit, parse units the way systemd does (and the `bash -c`
scripts in them the way the shell would run them, without running them), and import an existing
unit (or llama-swap config) into a profile.

May import: `specd.errors`, `specd.paths`, `specd.profiles`, `specd.gpu`.
"""
