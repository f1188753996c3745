"""Faults owners cause around a running deployment (issue 21's list): pruned backups, a removed
profiles directory, a profile replaced by a symlink, the state database deleted under the daemon.
Each asserts what the owner relies on: the endpoint keeps serving, history stays true, and what
cannot work says why and changes nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from specd.unit.render import profile_of_unit
from tests.conftest import Box, alias_answers
from tests.system.daemon_rig import chat, real_stack
from tests.system.fault_results import FaultRecorder


@real_stack
def test_rollback_works_after_every_backup_file_was_pruned(box: Box, fault_results: FaultRecorder) -> None:
    for name in ("autoregressive", "ngram-simple", "ngram-mod"):
        box.specd("switch", name, check=True)
    expected = {name: json.loads(box.specd("show", name, "--json", check=True).stdout)["unit"]
                for name in ("autoregressive", "ngram-simple")}
    for backup in box.unit_path.parent.glob(f"{box.unit}.pre-*"):
        backup.unlink()  # what backups_keep pruning (or an owner tidying up) does
    box.specd("rollback", check=True)
    assert box.unit_path.read_text() == expected["ngram-simple"]
    box.specd("rollback", check=True)
    assert box.unit_path.read_text() == expected["autoregressive"] and alias_answers(box.port)
    fault_results.record("rollback after every `.pre-*` backup was pruned", bound="each earlier unit restored "
                         "byte for byte", measured="2 rollbacks, both byte for byte; the alias answers")


@real_stack
def test_a_removed_profiles_directory_is_named_and_the_deployment_keeps_working(
        box: Box, fault_results: FaultRecorder) -> None:
    box.specd("switch", "autoregressive", check=True)
    box.specd("switch", "ngram-simple", check=True)
    shutil.rmtree(box.profiles_dir)
    status = box.specd("status", "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["active_profile"] == "ngram-simple"
    refused = box.specd("switch", "ngram-mod")
    assert refused.returncode == 2 and str(box.profiles_dir) in refused.stderr
    assert profile_of_unit(box.unit_path.read_text()) == "ngram-simple"
    rolled = box.specd("rollback")  # the unit texts live in specd's store, not in the profiles
    assert rolled.returncode == 0, rolled.stderr
    assert profile_of_unit(box.unit_path.read_text()) == "autoregressive" and alias_answers(box.port)
    fault_results.record("the profiles directory removed", bound="status healthy; switch refused naming the "
                         "directory, exit 2, unit unchanged; rollback works",
                         measured="as bound; rollback restored autoregressive")


@real_stack
def test_a_profile_replaced_by_a_symlink_is_followed_and_named_as_the_link(
        box: Box, tmp_path: Path, fault_results: FaultRecorder) -> None:
    elsewhere = tmp_path / "kept-elsewhere.toml"
    shutil.move(box.profiles_dir / "ngram-mod.toml", elsewhere)
    (box.profiles_dir / "ngram-mod.toml").symlink_to(elsewhere)
    switched = box.specd("switch", "ngram-mod")
    assert switched.returncode == 0, switched.stderr
    history = json.loads(box.specd("history", "--json", check=True).stdout)
    assert history[0]["profile"] == "ngram-mod" and alias_answers(box.port)
    fault_results.record("a profile replaced by a symlink", bound="followed (user scope); history names the link",
                         measured="switched; history names ngram-mod")


@real_stack
@pytest.mark.own_threads
def test_the_state_database_deleted_under_the_daemon_is_recreated_and_serving_goes_on(
        box: Box, start_daemon: Any, fault_results: FaultRecorder) -> None:
    daemon = start_daemon()
    box.specd("switch", "autoregressive", check=True)
    for path in daemon.state_dir.glob("specd.db*"):
        path.unlink()
    reply = httpx.post(f"{daemon.proxy_url}/v1/chat/completions", json=chat(False), timeout=60)
    assert reply.status_code == 200
    box.specd("switch", "ngram-simple", check=True)
    history = json.loads(box.specd("history", "--json", check=True).stdout)
    assert [g["profile"] for g in history][:1] == ["ngram-simple"]
    daemon.wait_for("the daemon to keep its heartbeat", lambda: daemon.status()["running"], 30)
    reply = httpx.post(f"{daemon.proxy_url}/v1/chat/completions", json=chat(False), timeout=60)
    assert reply.status_code == 200
    # What the daemon itself records after the deletion lands in the new database, not in the deleted one.
    daemon.wait_for("the proxy's traffic rows in the new database", lambda: json.loads(
        box.specd("traffic", "--json", "--since", "1h", check=True).stdout)["requests"] == 2, 30)
    daemon.systemctl("stop", box.unit)
    daemon.wait_for("the monitor's owner-stopped event in the new database", lambda: any(
        e["kind"] == "owner-stopped"
        for e in json.loads(box.specd("history", "--events", "--json", check=True).stdout)), 60)
    fault_results.record("the state database deleted under the running daemon",
                         bound="the proxy keeps serving; the next switch, the proxy's traffic rows and the monitor's "
                         "events land in a new database", measured="as bound")
