"""Setting a box up: doctor, quickstart, the private `systemd --user` sandbox, and which box this
is (its name and hardware, for results compared across boxes).

May import anything below the CLI.
"""
