"""Profiles and configuration: the profile keys (one definition each), loading, inheritance and
validation of profile TOML, `specd.toml`, and what a llama-server binary's `--help` accepts.

May import: `specd.errors`, `specd.paths`, `specd.gpu` (GGUF facts). Nothing above.
"""
