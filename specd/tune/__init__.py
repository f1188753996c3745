"""Tuning: workloads, replay, benchmarking, statistics, the performance model, the tuner's
decision, verify (fidelity) and pins.

May import: `specd.deploy`, `specd.traffic`, `specd.profiles`, `specd.unit`, `specd.gpu`,
`specd.emulator.model`.
"""
