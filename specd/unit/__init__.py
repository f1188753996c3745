"""Units: render a profile into a systemd unit, parse units the way systemd does, and import an
existing unit (or llama-swap config) into a profile.

May import: `specd.errors`, `specd.paths`, `specd.profiles`, `specd.gpu`.
"""
