import json, time
from pathlib import Path
from tests.conftest import Box
from tests.test_tune_real import repeat_workload

def test_figs(box: Box, real_server: None, tmp_path: Path) -> None:
    box.specd("switch", "autoregressive", check=True)
    w = str(repeat_workload(tmp_path / "r.jsonl"))
    out = []
    for name, n, mt in (("prose", 4, 48), (w, 6, 128)):
        t = time.monotonic()
        r = box.specd("tune", "--workload", name, "--n", str(n), "--max-tokens", str(mt), "--json", "--profile", "autoregressive", "--profile", "ngram-simple", timeout=600)
        d = json.loads(r.stdout)
        out.append({"workload": Path(name).name, "reason": d["reason"], "best": d["best"], "switch": d["switch"], "bench_s": d["bench_s"], "cmd_s": time.monotonic() - t, "est": {k: (round(v["median_ms"]), v["n"]) for k, v in d["estimates"].items()}})
    Path("/tmp/real_figs.json").write_text(json.dumps(out, indent=1))
