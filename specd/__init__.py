"""specd: switch, guard and tune llama-server's speculative-decoding profiles under systemd."""

__version__ = "0.1.0"
