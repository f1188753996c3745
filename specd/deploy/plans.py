"""The plans: which steps each way of installing a server runs, in order. The one place a step is
added to a strategy (its action, undo and what it touches are defined once, in specd.deploy.steps
or, for blue-green's own, specd.deploy.bluegreen).

    restart     backup -> write -> reload -> restart -> gate
    blue-green  backup -> write -> reload -> start -> gate -> flip -> drain -> stop-old -> enable
    shadow      write -> reload -> start -> gate      (held while the bench runs, then reverted)

The restart plan replaces the serving slot's server in place, inside the proxy's drain; blue-green
starts the new server in the free slot beside the old one and flips the proxy to it; the shadow
plan starts a shadow bench's candidate in the free slot and never flips (specd.tune.shadow), so
a killed bench's candidate is stopped and its slot file put back by the next recovery.
"""

from __future__ import annotations

from specd.deploy import bluegreen
from specd.deploy.intent import PlanName
from specd.deploy.steps import (
    BACKUP,
    GATE,
    RELOAD,
    RESTART,
    START,
    START_LOWERED,
    WRITE,
    restart_settled,
    shadow_settled,
)
from specd.deploy.transaction import Plan

PLANS: dict[PlanName, Plan] = {
    "restart": Plan("restart", (BACKUP, WRITE, RELOAD, RESTART, GATE), restart_settled),
    "blue-green": Plan("blue-green", (BACKUP, WRITE, RELOAD, START_LOWERED, GATE, *bluegreen.AFTER_GATE),
                       bluegreen.settled),
    "shadow": Plan("shadow", (WRITE, RELOAD, START, GATE), shadow_settled),
}
OUTSIDE = ("preflight", "intent")  # the fault points before a plan's first step (and "commit" after its last)


def fault_points(plan: PlanName) -> tuple[str, ...]:
    """Every fault point of an operation on `plan`, in order: what crash tests kill the process at."""
    return (*OUTSIDE, *PLANS[plan].names, "commit")


STEPS = fault_points("restart")
BLUE_GREEN_STEPS = fault_points("blue-green")
REVERT_STEPS = PLANS["restart"].revert_points()
BLUE_GREEN_REVERT_STEPS = PLANS["blue-green"].revert_points()
