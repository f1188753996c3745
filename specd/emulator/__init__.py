"""The llama-server *performance emulator*: an HTTP server that answers like llama-server with
timings from fitted tables. Not a real model; named so everywhere it is used.

May import: `specd.errors` and `specd.traffic.taskclass` (the task classes its tables are fitted by).
"""
