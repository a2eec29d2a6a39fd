"""Which of a folder's decisions stands for export, as data (report/export.py says and writes it): a measured choice
supersedes a simulated one (`standing`), and a setting picked by hand instead of the chosen one is accepted only
where it ran and fitted (`hand_picked`)."""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from ..results.choices import ChoiceRecord
from ..results.folder import Skipped, SweepInfo
from ..results.records import TrialRecord, TrialState


def standing(choices: list[ChoiceRecord]) -> list[ChoiceRecord]:
    """The choices that stand: a hybrid sweep decides by replay, then confirms on the GPU, so the measured choices
    supersede the simulated ones."""
    return [c for c in choices if not c.simulated] or choices


class Refusal(str, enum.Enum):
    """Why a hand-picked setting is not exported."""

    SKIPPED = "skipped"   # the sweep skipped it in the choice's environment (`HandPick.skipped` says why)
    NOT_RUN = "not_run"   # no trial of it ran in the choice's environment and backend
    FAILED = "failed"     # a trial of it did not end OK there


@dataclass(frozen=True)
class HandPick:
    """A setting picked by hand for a choice: the choice with it (`choice`), or why not (`refusal`) with what the
    words quote."""

    conf: str                              # canonical
    choice: ChoiceRecord | None = None     # accepted: the choice with `conf` instead of the chosen setting
    refusal: Refusal | None = None
    skipped: Skipped | None = None         # SKIPPED: the sweep's entry for it
    ran: tuple[str, ...] = ()              # NOT_RUN: the settings that ran there
    failed: tuple[TrialRecord, ...] = ()   # FAILED: its trials that did not end OK
    trials: int = 0                        # FAILED: its trials there


def hand_picked(choice: ChoiceRecord, conf: str, trials: list[TrialRecord], info: SweepInfo) -> HandPick:
    """`choice` with the setting `conf` (canonical) instead, accepted where every trial of it in the choice's
    environment and backend ended OK; `trials`: the folder's."""
    there = [r for r in trials if r.env_id == choice.env_id and r.backend == choice.backend]
    mine = [r for r in there if r.conf == conf]
    if not mine:
        skipped = info.skipped_as(conf, choice.env_id)
        if skipped is not None:
            return HandPick(conf, refusal=Refusal.SKIPPED, skipped=skipped)
        return HandPick(conf, refusal=Refusal.NOT_RUN, ran=tuple(sorted({r.conf for r in there})))
    failed = tuple(r for r in mine if r.state is not TrialState.OK)
    if failed:
        return HandPick(conf, refusal=Refusal.FAILED, failed=failed, trials=len(mine))
    return HandPick(conf, choice=replace(choice, conf=conf))
