"""Setting a box up: doctor, quickstart, and the private `systemd --user` sandbox.

May import anything below the CLI.
"""
