"""Routing: each request to the resident profile that fits its task class and the load now.

Owns the routing table (class -> profile, with the evidence it was learned from: `table.py`), the
per-request choice among the resident servers (`choose.py`: class, load, a conversation's cached
prefix), conversation affinity (`affinity.py`), per-request draft settings for an engine that
honours them (`stamp.py`, and the probe that asks the binary: `probe.py`), the routing state of a
deployment (on or off, the resident companions, the mode: `state.py`), what the table would do on
the recorded traffic (`dryrun.py`), and turning routing on and off (`residents.py`: companion
servers started and stopped through systemd, health-gated, drained through the proxy).

May import: errors, paths, clock, durable, store, profiles, gpu, unit, deploy, traffic. The proxy,
the daemon, the tuner and the CLI use it; the tuner learns the table (specd.tune.routes).
"""
