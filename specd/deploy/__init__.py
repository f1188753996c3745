"""The deploy transaction: switch, rollback and revert over injected seams (systemd client, unit
files, state store, health gate, clock), with the intent record, lock, history and preflight; the
companion units routing keeps beside the slots, which every capacity check counts.

May import: `specd.errors`, `specd.paths`, `specd.store`, `specd.profiles`, `specd.gpu`,
`specd.unit`. Never `specd.daemon` or `specd.tune`: draining, metrics and fault points are
passed in by the caller.
"""
