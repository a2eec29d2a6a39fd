"""About how many GPU trials a sweep runs, told before any has (`first_estimate`); the rounds keep it current after
each (`rounds.trials_to_come`). Pure: from what the sweep planned per environment and what was asked (`Asked`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..settings.conf import AllocConf
from .rounds import Contention, Standing, trials_to_come


@dataclass(frozen=True)
class Asked:
    """What the count rests on, of the sweep's options and plan."""

    hybrid: bool           # replays every setting, measures a few on the GPU
    recording: bool        # the default's first trial records the trace (a hybrid without one)
    command: bool          # a user's command: its recording is an extra trial, a workload's is the default's first
    auto: bool             # --repeats auto: rounds until the answer is known
    confirm: bool          # --repeats confirm (a hybrid's): one pair confirms the predicted winner
    rounds: int            # the repeats, or with 'auto' the most rounds
    finalists: int         # a hybrid's settings measured beside the default (fixed repeats)
    searched: bool         # a search finds the settings the replay judges
    named: bool            # the user named the settings (--conf, --grid, the workload's grid)
    max_slowdown: float


def first_estimate(planned: Iterable[list[AllocConf]], asked: Asked) -> int:
    """The GPU trials of the settings `planned` per environment: with fixed repeats, what it plans (a hybrid's
    finalists, as many as asked, and a backend switch where the grid has one); with 'auto', the rounds' own
    estimate when no setting's memory is known yet (cuda), or, for a hybrid before its replay, for one leader whose
    memory the replay gives and each backend switch; with 'confirm', the confirmation pair and, for a backend switch
    the user named, its rounds; plus each first default run and a command's recording trial (an extra one)."""
    total = int(asked.hybrid and asked.recording and asked.command)
    for confs in planned:
        switches = [c for c in confs if c.is_async]
        natives = [c for c in confs if not c.is_default and not c.is_async]
        if asked.hybrid and asked.confirm:
            total += _confirmed(switches, natives, asked)
        elif not asked.auto:
            total += _fixed(switches, natives, asked)
        else:
            total += _rounds(switches, natives, asked)
    return total


def _open(confs: list[AllocConf]) -> list[Standing]:
    return [Standing(str(c), Contention.NOT_MEASURED) for c in confs]


def _confirmed(switches: list[AllocConf], natives: list[AllocConf], asked: Asked) -> int:
    """--repeats confirm: the default's first run (a workload's recording is it), the confirmed setting's run
    (where the replay has any to judge), and the rounds of a backend switch the user named."""
    rows = _open(switches) if asked.named else []
    return ((not (asked.recording and not asked.command)) + bool(natives or asked.searched)
            + (trials_to_come(rows, asked.max_slowdown, asked.rounds) if rows else 0))


def _fixed(switches: list[AllocConf], natives: list[AllocConf], asked: Asked) -> int:
    """Fixed repeats: the default, the settings measured (a hybrid's finalists) and the backend switches, each
    `rounds` times."""
    measured = min(asked.finalists, len(natives)) if asked.hybrid else len(natives)
    return (1 + measured + len(switches)) * asked.rounds


def _rounds(switches: list[AllocConf], natives: list[AllocConf], asked: Asked) -> int:
    """--repeats auto: the first default run and the rounds' estimate, for every setting a plain sweep measures,
    or a hybrid's backend switches and the one leader its replay finds (a search finds its own)."""
    rows = _open(switches + ([] if asked.hybrid else natives))
    if asked.hybrid and (natives or asked.searched):
        rows.append(Standing("leader", Contention.NOT_MEASURED, memory_known=True))
    return 1 + trials_to_come(rows, asked.max_slowdown, asked.rounds)
