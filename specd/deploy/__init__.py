"""The deploy transaction: switch, rollback, revert and a shadow bench's candidate, each a plan of
named, reversible steps run by one engine (`transaction.py`, `plans.py`) over injected seams
(systemd client, unit files, state store, health gate, clock, the daemon's proxy), with the intent
record, lock, history and preflight; the companion units routing keeps beside the slots, which every
capacity check counts.

May import: `specd.errors`, `specd.paths`, `specd.store`, `specd.durable`, `specd.secrets`,
`specd.profiles`, `specd.gpu`, `specd.unit`. Never `specd.daemon` or `specd.tune`: the proxy's
drain and retarget come in as the `ProxyLink` seam, fault points as a hook.
"""
