"""The collection's playbooks against three boxes, each its own private `systemd --user`, HOME,
state and ports with the real llama-server and the tiny model (tests/system/fleet_rig.py).

The rollout gives box2 a profile the real llama-server cannot load (V-cache quantization without
flash attention: it exits while loading), so its health gate fails for real.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import require_real_server
from tests.system.fleet_rig import COLLECTION_SRC, Ansible, FleetBox, fleet
from tests.system.prometheus_rig import ScrapeJob, prometheus

pytestmark = [pytest.mark.systemd, pytest.mark.llama]

GOOD = '''inherits = "base"
description = "ngram-simple speculation, drafts up to 12 tokens"

[speculative]
type = "ngram-simple"
draft_n_max = 12
'''
# The same TOML, written differently: comments, key order, quoting, spacing.
GOOD_REFORMATTED = '''# rolled out by Ansible
description = 'ngram-simple speculation, drafts up to 12 tokens'
inherits    = "base"
[speculative]
draft_n_max = 12   # tokens per draft
type = "ngram-simple"
'''
# V-cache quantization needs flash attention: this llama-server exits while loading the model.
BROKEN = '''inherits = "base"
description = "ngram-simple speculation, quantized V cache"
flash_attn = "off"
cache_type_v = "q4_0"

[speculative]
type = "ngram-simple"
draft_n_max = 12
'''
PROFILE = "candidate"


@pytest.fixture(scope="module")
def boxes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[FleetBox], Ansible]]:
    """Three boxes with specd, specd.toml and the daemon installed by the install playbook (the
    specd_install role), each running the autoregressive profile."""
    require_real_server()
    root = tmp_path_factory.mktemp("fleet")
    with fleet(root, ("box1", "box2", "box3")) as fleet_boxes:
        ansible = Ansible(root / "ansible", fleet_boxes)
        ansible.install_collection()
        installed = ansible.playbook("install")
        assert installed.returncode == 0, installed.output[-6000:]
        assert installed.changed_hosts() == ["box1", "box2", "box3"]
        reinstalled = ansible.playbook("install")
        assert reinstalled.returncode == 0 and reinstalled.changed_hosts() == [], reinstalled.output[-6000:]
        for box in fleet_boxes:
            assert box.specd("status", "--json", check=False).returncode == 3  # no unit yet: not healthy
            box.specd("switch", "autoregressive")
            assert box.status()["daemon"]["running"], box.daemon_log()
        yield fleet_boxes, ansible


def _switch_result(run, host: str) -> dict:
    found = run.of(host, "Switch to it; specd reverts by itself when the gate fails")
    assert len(found) == 1, run.output[-6000:]
    return found[0]


# One story, seven playbook runs that restart real llama-servers (and, first in the module, the
# fleet's setup): about 6 minutes on an idle 2-core machine, more when it is shared.
@pytest.mark.timeout(1800)
def test_rollout_stops_at_the_box_whose_gate_fails_and_converges_idempotently(boxes) -> None:
    fleet_boxes, ansible = boxes
    box1, box2, box3 = fleet_boxes
    units_before = {box.name: box.unit_path.read_text() for box in fleet_boxes}
    ansible.write_inventory(fleet_boxes, group_vars={"specd_rollout_content": GOOD},
                            host_vars={"box2": {"specd_rollout_content": BROKEN}})

    first = ansible.playbook("rollout", {"specd_rollout_profile": PROFILE})

    assert first.returncode != 0, first.output[-6000:]
    switched = _switch_result(first, "box1")
    assert switched["status"] == "ok" and switched["changed"]
    assert isinstance(switched["result"]["generation"], int)
    assert switched["result"]["gate"]["ok"] and switched["result"]["gate"]["load_s"] > 0
    assert switched["result"]["timings"]["total_s"] >= switched["result"]["gate"]["total_s"]
    assert box1.status()["active_profile"] == PROFILE and box1.status()["healthy"]

    failed = _switch_result(first, "box2")
    assert failed["status"] == "failed"
    revert = failed["result"]["revert"]
    assert revert["outcome"] == "reverted" and "reverted to autoregressive, which is healthy again" in revert["state"]
    assert failed["result"]["generation_record"]["outcome"] == "reverted"
    assert failed["result"]["active_profile"] == "autoregressive"
    assert box2.unit_path.read_text() == units_before["box2"]  # the box put its old unit back itself
    status2 = box2.status()
    assert status2["active_profile"] == "autoregressive" and status2["healthy"], status2
    assert box2.history()[0]["profile"] == PROFILE and box2.history()[0]["outcome"] == "reverted"

    assert [r for r in first.results if r["host"] == "box3"] == []  # never reached
    assert box3.unit_path.read_text() == units_before["box3"]
    assert not (box3.profiles_dir / f"{PROFILE}.toml").exists()
    assert box3.status()["active_profile"] == "autoregressive"

    facts = ansible.playbook("facts")
    assert facts.returncode == 0, facts.output[-6000:]
    read = {r["host"]: r["result"]["ansible_facts"]["specd"] for r in facts.results if r["task"] == "Read the facts"}
    assert read["box2"]["last_failure"]["profile"] == PROFILE and read["box2"]["active_profile"] == "autoregressive"
    assert read["box1"]["last_failure"] is None and read["box1"]["active_profile"] == PROFILE
    assert [read[name]["box"]["name"] for name in ("box1", "box2", "box3")] == ["box1", "box2", "box3"]
    assert read["box3"]["gpus"] == [] and read["box3"]["box"]["hardware"]["gpu_note"]  # no GPU on this machine

    # Fixed for box2 (its override removed): check mode predicts, changes nothing.
    ansible.write_inventory(fleet_boxes, group_vars={"specd_rollout_content": GOOD})
    units_now = {box.name: box.unit_path.read_text() for box in fleet_boxes}
    checked = ansible.playbook("rollout", {"specd_rollout_profile": PROFILE}, check=True, diff=True)
    assert checked.returncode == 0, checked.output[-6000:]
    assert checked.changed_hosts() == ["box2", "box3"]
    shipped2 = checked.of("box2", "Ship the profile file")[0]["result"]
    assert 'cache_type_v = "q4_0"' in shipped2["diff"]["before"] and "cache_type_v" not in shipped2["diff"]["after"]
    assert {box.name: box.unit_path.read_text() for box in fleet_boxes} == units_now
    assert (box2.profiles_dir / f"{PROFILE}.toml").read_text() == BROKEN
    assert not (box3.profiles_dir / f"{PROFILE}.toml").exists()

    converged = ansible.playbook("rollout", {"specd_rollout_profile": PROFILE})
    assert converged.returncode == 0, converged.output[-6000:]
    assert converged.changed_hosts() == ["box2", "box3"]
    for box in fleet_boxes:
        status = box.status()
        assert status["active_profile"] == PROFILE and status["healthy"], (box.name, status)

    again = ansible.playbook("rollout", {"specd_rollout_profile": PROFILE})
    assert again.returncode == 0, again.output[-6000:]
    assert again.changed_hosts() == [], again.output[-6000:]
    assert len(again.hosts_with("ok")) == 3

    # The same TOML written differently is the same profile: nothing is rewritten or restarted.
    ansible.write_inventory(fleet_boxes, group_vars={"specd_rollout_content": GOOD_REFORMATTED})
    reformatted = ansible.playbook("rollout", {"specd_rollout_profile": PROFILE})
    assert reformatted.returncode == 0 and reformatted.changed_hosts() == [], reformatted.output[-6000:]
    assert "only formatting or comments differ" in (
        reformatted.of("box1", "Ship the profile file")[0]["result"]["reason"])
    assert (box1.profiles_dir / f"{PROFILE}.toml").read_text() == GOOD


def test_a_profile_specd_rejects_is_put_back_and_stops_the_rollout(boxes) -> None:
    fleet_boxes, ansible = boxes
    box1 = fleet_boxes[0]
    before = {box.name: (box.unit_path.read_text(), (box.profiles_dir / f"{PROFILE}.toml").read_text()
                         if (box.profiles_dir / f"{PROFILE}.toml").exists() else None) for box in fleet_boxes}
    ansible.write_inventory(fleet_boxes,
                            group_vars={"specd_rollout_content": GOOD.replace("draft_n_max", "draft_n_mx")})

    run = ansible.playbook("rollout", {"specd_rollout_profile": PROFILE})

    assert run.returncode != 0
    shipped = run.of("box1", "Ship the profile file")[0]
    assert shipped["status"] == "failed"
    assert "draft_n_mx" in shipped["result"]["msg"] and "rejected by specd" in shipped["result"]["msg"]
    assert run.hosts_with("ok") == [] and {r["host"] for r in run.results} == {"box1"}
    assert {box.name: (box.unit_path.read_text(), (box.profiles_dir / f"{PROFILE}.toml").read_text()
                       if (box.profiles_dir / f"{PROFILE}.toml").exists() else None) for box in fleet_boxes} == before
    assert box1.status()["healthy"]


def test_rollback_playbook_undoes_the_rollout_once(boxes) -> None:
    fleet_boxes, ansible = boxes
    ansible.write_inventory(fleet_boxes, group_vars={"specd_rollout_content": GOOD})
    rolled_out = ansible.playbook("rollout", {"specd_rollout_profile": PROFILE})
    assert rolled_out.returncode == 0, rolled_out.output[-6000:]
    assert all(box.status()["active_profile"] == PROFILE for box in fleet_boxes)

    back = ansible.playbook("rollback", {"specd_rollback_from": PROFILE})

    assert back.returncode == 0, back.output[-6000:]
    assert back.changed_hosts() == ["box1", "box2", "box3"]
    for box in fleet_boxes:
        status = box.status()
        assert status["active_profile"] == "autoregressive" and status["healthy"], (box.name, status)
        assert box.history()[0]["kind"] == "rollback" and box.history()[0]["outcome"] == "ok"
    twice = ansible.playbook("rollback", {"specd_rollback_from": PROFILE})
    assert twice.returncode == 0 and twice.changed_hosts() == [], twice.output[-6000:]


def test_tune_report_tabulates_comparable_results_from_every_box(boxes, tmp_path: Path) -> None:
    fleet_boxes, ansible = boxes
    ansible.write_inventory(fleet_boxes)
    args = ["--profile", "autoregressive", "--profile", "ngram-simple", "--workload", "code", "--n", "2",
            "--max-n", "8", "--max-tokens", "8", "--no-verify"]

    run = ansible.playbook("tune_report", {"specd_tune_dir": str(tmp_path), "specd_tune_args": args})

    assert run.returncode == 0, run.output[-6000:]
    documents = {path.stem: json.loads(path.read_text()) for path in tmp_path.glob("*.json")}
    assert sorted(documents) == ["box1", "box2", "box3"]
    for name, document in documents.items():
        assert document["schema"] == "specd.tune/1" and document["box"]["name"] == name
        # ngram-simple drafts only where an answer repeats its context: on 8-token answers it may draft
        # nothing on a box, and is then left out of that box's decision, with the reason, never dropped.
        assert "autoregressive" in document["estimates"], document
        assert sorted([*document["estimates"], *document["left_out"]]) == ["autoregressive", "ngram-simple"], document
        assert all("no token drafted" in why for why in document["left_out"].values()), document["left_out"]
        assert document["models"] == {"autoregressive": "gemma-3-270m-q4_k_m.gguf",
                                      "ngram-simple": "gemma-3-270m-q4_k_m.gguf"}
        assert document["final_profile"] == "autoregressive"  # a dry run ends where it started
    shown = run.of("localhost", "Run specd tune-table")[0]["result"]["stdout"]
    assert all(name in shown for name in documents), shown
    rows = json.loads(fleet_boxes[0].specd("tune-table", "--json", *map(str, sorted(tmp_path.glob("*.json")))).stdout)
    for name, document in documents.items():
        mine = {row["profile"]: row for row in rows if row["box"] == name}
        assert sorted(mine) == ["autoregressive", "ngram-simple"]
        assert all((row["median_ms"] is None) == (profile in document["left_out"]) for profile, row in mine.items())
        assert [p for p, row in mine.items() if row["best"]] == [document["best"]]
        assert mine["autoregressive"]["median_ms"] == document["estimates"]["autoregressive"]["median_ms"]
        assert mine["autoregressive"]["hardware"].startswith(f"{document['box']['hardware']['cpu_count']} CPUs")


@dataclass(frozen=True)
class ExampleFileSdJob(ScrapeJob):
    """The scrape job of ansible/examples/prometheus/prometheus.yml, reading `files` instead of
    /etc/prometheus/file_sd/specd.json."""

    files: tuple[str, ...] = ()
    example: dict[str, Any] = field(default_factory=dict)

    def as_config(self) -> dict[str, Any]:
        job = copy.deepcopy(self.example)
        for sd_config in job["file_sd_configs"]:
            sd_config["files"] = list(self.files)
        return job


def test_one_prometheus_reads_every_box_active_profile_through_file_sd(boxes, tmp_path: Path) -> None:
    fleet_boxes, ansible = boxes
    fleet_boxes[2].specd("switch", "ngram-mod")  # so that the boxes do not all run the same profile
    fleet_boxes[1].write_profile("broken", BROKEN)  # and box2's newest generation is a reverted one
    assert fleet_boxes[1].specd("switch", "broken", check=False).returncode == 1
    expected = {box.name: box.status()["active_profile"] for box in fleet_boxes}
    assert expected["box3"] == "ngram-mod" and expected["box2"] != "broken" and len(set(expected.values())) > 1
    ansible.write_inventory(fleet_boxes, group_vars={"specd_deployment": "tiny-gemma"},
                            host_vars={"box2": {"specd_prometheus_labels": {"gpu": "none"}}})
    targets = tmp_path / "specd.json"

    written = ansible.playbook("prometheus_targets", {"specd_file_sd_path": str(targets)})

    assert written.returncode == 0, written.output[-6000:]
    example = yaml.safe_load((COLLECTION_SRC / "examples" / "prometheus" / "prometheus.yml").read_text())
    job = ExampleFileSdJob(name="specd", targets=(), files=(str(targets),), example=example["scrape_configs"][0])
    with prometheus([job], tmp_path / "prometheus") as prom:
        up = prom.wait_for_targets_up(timeout_s=120)
        assert sorted(t["labels"]["box"] for t in up) == ["box1", "box2", "box3"]

        def active_profiles() -> dict[str, str] | None:
            found = {r["metric"]["box"]: r["metric"]["profile"] for r in prom.query("specd_active_profile == 1")}
            return found if found == expected else None

        prom.wait_for(f"specd_active_profile == 1 to give {expected}", active_profiles, timeout_s=120)
        samples = prom.query("specd_active_profile == 1")
        by_box = {r["metric"]["box"]: r["metric"] for r in samples}
        for box in fleet_boxes:
            assert by_box[box.name]["deployment"] == "tiny-gemma" and by_box[box.name]["unit"] == box.unit
        assert by_box["box2"]["gpu"] == "none" and "gpu" not in by_box["box1"]
