"""GPU facts: NVML devices and per-process memory, the one GGUF header reader, and the VRAM
estimate for a profile.

May import: `specd.errors`, `specd.paths`, `specd.profiles`.
"""
