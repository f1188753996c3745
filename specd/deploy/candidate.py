"""A shadow bench's candidate: a server in the free slot that never serves, started and stopped by
the transaction engine's shadow plan (write -> reload -> start -> gate, specd.deploy.plans).

The candidate's transaction is held while the bench measures it: its intent record stays on disk
(`StateDir.candidate_intent`, apart from a switch's) until `Candidate.stop` reverts it, which
stops the server and puts the free slot's unit file back as it was. A bench killed with its
candidate running is undone by the next recovery (`specd recover`, any switch or rollback), the
same undos walked from the record; a failure while starting reverts at once. The caller holds the
deployment's lock around `start_candidate` and `Candidate.stop` (specd.tune.shadow does).
"""

from __future__ import annotations

from specd.deploy import intent as intents
from specd.deploy.plan import FaultHook, HealthGate, Target
from specd.deploy.plans import PLANS
from specd.deploy.seams import Seams
from specd.deploy.slots import other
from specd.deploy.transaction import Run, Transaction
from specd.deploy.unitfiles import read_text
from specd.durable import checkpoint
from specd.unit.render import profile_of_unit


class Candidate:
    """A candidate running in the free slot; `stop` ends it (once)."""

    def __init__(self, transaction: Transaction) -> None:
        self._transaction: Transaction | None = transaction

    @property
    def unit(self) -> str:
        assert self._transaction is not None
        return self._transaction.run.new.unit

    @property
    def main_pid(self) -> int:
        if self._transaction is None:
            return 0
        return self._transaction.run.seams.systemd.unit_state(self.unit).main_pid

    def stop(self) -> str | None:
        """Stop the server and put the free slot's unit file back; None when already stopped."""
        if self._transaction is None:
            return None
        transaction, self._transaction = self._transaction, None
        sentence = transaction.revert()
        transaction.clear()
        return sentence


def _run(seams: Seams, intent: intents.Intent, gate: HealthGate, fault: FaultHook,
         target: Target | None = None) -> Transaction:
    run = Run(seams, intent, gate, lambda step, detail: fault(step), target=target)
    return Transaction(PLANS["shadow"], run, seams.state.candidate_intent(seams.unit))


def start_candidate(seams: Seams, target: Target, *, gate: HealthGate, fault: FaultHook = checkpoint) -> Candidate:
    """Start `target` in the free slot and gate it; on any failure it is reverted and the error raised."""
    serving = seams.serving()
    live = read_text(serving.unit_path)
    intent = intents.Intent(seams.unit, "shadow", "shadow", target.profile, profile_of_unit(live) if live else None,
                            serving.name, other(serving.name))
    transaction = _run(seams, intent, gate, fault, target)
    transaction.begin()
    try:
        transaction.apply()
    except (Exception, KeyboardInterrupt):  # bugs and Ctrl-C too; a kill is recovered later
        transaction.revert()
        transaction.clear()
        raise
    return Candidate(transaction)


def recover_candidate(seams: Seams, *, gate: HealthGate, fault: FaultHook = checkpoint) -> str | None:
    """Stop a candidate a killed bench left running and put its slot file back; None when there is none."""
    pending = intents.load(seams.state.candidate_intent(seams.unit))
    if pending is None:
        return None
    transaction = _run(seams, pending, gate, fault)
    sentence = transaction.revert()
    transaction.clear()
    return f"a shadow bench was interrupted: {sentence}"
