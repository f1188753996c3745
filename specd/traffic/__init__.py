"""Traffic: what the proxy records about each request (task class, lengths, timings, bodies when
asked), and reading it back as workloads for the tuner.

May import: `specd.errors`, `specd.paths`, `specd.store`.
"""
