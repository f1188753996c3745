"""The servers specd can run, and what differs between them: one place per fact.

`facts.py` names each engine's facts (its Prometheus prefix and counters, the metrics that count
requests in progress, how to recognise its command line and read the served name and port back
from it, the fix doctor suggests); `metrics.py` reads the speculative-decoding counters both engines
publish on `/metrics`; `vllm_flags.py` asks an installed vLLM what it accepts (`vllm serve
--help=all`, its SpeculativeConfig keys), as `specd.profiles.flags` asks llama-server; `vllm_render.py`
turns a vLLM profile into its `vllm serve` argv and checks it against those answers.

llama-server's own rendering and flags stay where they were (`specd.unit.render`,
`specd.profiles.flags`): the llama-server path is unchanged, and a vLLM profile takes the other branch
at the few places that differ (preflight, reading a unit back, drain, the bench's counters, doctor).

May import: `specd.errors`, `specd.paths`, `specd.profiles`. Nothing above (`unit`, `deploy`, `tune`
import this).
"""
