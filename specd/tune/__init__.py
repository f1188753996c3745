"""Tuning: workloads, replay, benchmarking, statistics, the performance model, the tuner's
decision, verify (fidelity), pins, and the routing table learned per task class from a bench.

May import: `specd.deploy`, `specd.routing`, `specd.traffic`, `specd.profiles`, `specd.unit`, `specd.gpu`,
`specd.emulator.model`.
"""
