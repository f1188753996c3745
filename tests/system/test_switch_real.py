"""Switching between the real tiny profiles through a real systemd, with the real llama-server."""

from __future__ import annotations

import json

import httpx
import pytest

from specd.unit.render import profile_of_unit

pytestmark = [pytest.mark.systemd, pytest.mark.llama, pytest.mark.usefixtures("real_server")]


def complete(port: int, alias: str = "tiny") -> dict[str, object]:
    body = {"model": alias, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8,
            "temperature": 0}
    response = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=60)
    response.raise_for_status()
    payload: dict[str, object] = response.json()
    return payload


def test_first_switch_creates_unit_and_alias_answers(box) -> None:
    assert not box.unit_path.exists()
    result = box.specd("switch", "autoregressive")
    assert result.returncode == 0, result.stderr
    assert "healthy" in result.stdout
    assert profile_of_unit(box.unit_path.read_text()) == "autoregressive"
    assert complete(box.port)["choices"]
    status = json.loads(box.specd("status", "--json", check=True).stdout)
    assert status["active_profile"] == "autoregressive"
    assert status["healthy"] is True


def test_switch_backup_history_and_rollback_walk(box) -> None:
    box.specd("switch", "autoregressive", check=True)
    box.specd("switch", "ngram-simple", check=True)
    backups = sorted(p.name for p in box.unit_path.parent.glob(f"{box.unit}.pre-*"))
    assert len(backups) == 1 and backups[0].endswith("-autoregressive")
    timings = complete(box.port)["timings"]
    assert isinstance(timings, dict) and timings["predicted_n"] > 0
    box.specd("switch", "ngram-mod", check=True)

    rolled = box.specd("rollback")
    assert rolled.returncode == 0, rolled.stderr
    assert profile_of_unit(box.unit_path.read_text()) == "ngram-simple"
    box.specd("rollback", check=True)
    assert profile_of_unit(box.unit_path.read_text()) == "autoregressive"
    assert complete(box.port)["choices"]

    history = json.loads(box.specd("history", "--json", check=True).stdout)
    kinds = [(g["kind"], g["profile"], g["outcome"]) for g in reversed(history)]
    assert kinds == [("switch", "autoregressive", "ok"), ("switch", "ngram-simple", "ok"),
                     ("switch", "ngram-mod", "ok"), ("rollback", "ngram-simple", "ok"),
                     ("rollback", "autoregressive", "ok")]
    assert all(g["trigger"] == "cli" and g["total_s"] > 0 for g in history)

    jump = box.specd("rollback", "--to", str(history[2]["id"]))
    assert jump.returncode == 0, jump.stderr
    assert profile_of_unit(box.unit_path.read_text()) == "ngram-mod"


def test_switch_to_same_profile_is_a_no_op(box) -> None:
    box.specd("switch", "autoregressive", check=True)
    before = box.unit_path.read_text()
    again = box.specd("switch", "autoregressive")
    assert again.returncode == 0
    assert "already on profile autoregressive" in again.stdout
    assert box.unit_path.read_text() == before
    assert len(list(box.unit_path.parent.glob(f"{box.unit}.pre-*"))) == 0


def test_show_and_diff_render_without_touching_anything(box) -> None:
    box.specd("switch", "autoregressive", check=True)
    before = box.unit_path.read_text()
    shown = box.specd("show", "ngram-simple", check=True).stdout
    assert '"--spec-type" "ngram-simple"' in shown
    diff = box.specd("diff", "ngram-simple", check=True).stdout
    assert "+# specd-profile: ngram-simple" in diff and "-# specd-profile: autoregressive" in diff
    assert box.unit_path.read_text() == before


def test_draft_model_profile_serves(box) -> None:
    result = box.specd("switch", "draft")
    assert result.returncode == 0, result.stderr
    assert '"--spec-type" "draft-simple"' in box.unit_path.read_text()
    assert complete(box.port)["choices"]


def test_hand_edit_becomes_a_generation_and_rollback_returns_to_it(box) -> None:
    box.specd("switch", "autoregressive", check=True)
    edited = box.unit_path.read_text().replace("RestartSec=3", "RestartSec=7")
    box.unit_path.write_text(edited)
    box.specd("switch", "ngram-simple", check=True)
    history = json.loads(box.specd("history", "--json", check=True).stdout)
    assert [g["kind"] for g in reversed(history)] == ["switch", "external-edit", "switch"]
    assert history[1]["detail"] == "the unit file was edited outside specd"
    box.specd("rollback", check=True)
    assert box.unit_path.read_text() == edited


def test_first_switch_on_a_hand_written_unit_can_be_rolled_back(box) -> None:
    from tests.system.test_import import HAND_WRITTEN

    box.unit_path.parent.mkdir(parents=True, exist_ok=True)
    hand = HAND_WRITTEN.replace("--port 8099", f"--port {box.port}").replace('"tiny,tiny-alt"', "tiny")
    box.unit_path.write_text(hand)
    box.specd("switch", "autoregressive", check=True)
    rolled = box.specd("rollback")
    assert rolled.returncode == 0, rolled.stderr
    assert box.unit_path.read_text() == hand
    assert complete(box.port)["choices"]
