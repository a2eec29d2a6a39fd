"""Which torch's allocator a replay follows: one rule for every command that replays (replay, search, fleet, fit,
diagnose, a sweep's replays), so that the same trace is simulated as the same torch everywhere.

The torch simulated is the trace's own (the one that recorded it), unless the command is told the torch that will
run the job: search's --python, replay's `torch_version`, a sweep's probed interpreters where they run the job (on a
GPU, or named with --python; a sweep that only replays, with neither, follows the trace as every other command).
Where the two differ, `Target.warnings` says both in one line. A trace that does not say its torch, with none told,
is replayed as `REFERENCE`'s, and said so. Text output states the torch followed as `simulated_with` says it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import OptionText
from ..results.vocabulary import Basis
from ..settings.validation import Validator, table_judge
from ..settings.versions import replay_note, simulation_note

REFERENCE = "2.11"   # the simulator's reference version: a trace of unknown torch is replayed as this one


def simulated_torch(version: str | None) -> str:
    """The torch whose allocator a replay follows, as every command states it: '2.11' from '2.11.0+cu130'; the
    reference version when unknown."""
    return ".".join(str(version or REFERENCE).split("+")[0].split(".")[:2])


def simulated_with(version: str | None) -> str:
    """The torch a replay followed, as every command's text states it, in the vocabulary's word for its figures:
    "replayed with torch 2.11's allocator"."""
    return f"{Basis.REPLAYED.value} with torch {simulated_torch(version)}'s allocator"


@dataclass(frozen=True)
class Target:
    """The torch a replay of one trace follows. `recorded`: the trace's (None: it does not say); `told`: the torch
    that will run the job, where the command was told it (None: not told), and `told_by` the option that told it
    ('python', rendered as the CLI's flag or the API's keyword)."""

    recorded: str | None
    told: str | None = None
    told_by: str = ""

    @property
    def version(self) -> str | None:
        """The full version followed ('2.11.0+cu130'), for the version rules; None: nobody says (rules for any)."""
        return self.told or self.recorded

    @property
    def followed(self) -> str:
        """The full version followed, the reference version where nobody says one: what a replay's record keeps
        (`simulated_as`) and what a sweep's replays are named by (sweeper/plan.Plan.replay_env_id)."""
        return self.version or self.simulated

    @property
    def simulated(self) -> str:
        """The version followed, as every command's JSON and header state it ('2.11')."""
        return simulated_torch(self.version)

    def judge(self, here: str, judge: Validator) -> Validator:
        """Who judges the settings of the torch followed: `judge`, an interpreter's own torch (`here`, its version),
        where it is the torch followed, else the version table of the torch followed (the trace's torch is seldom
        installed beside this one)."""
        return judge if simulated_torch(here) == self.simulated else table_judge(self.version or REFERENCE)

    def warnings(self) -> list[str]:
        """What the user must know of the torch followed: the recording's and the told torch where they differ, in
        one line; a version the simulator does not know; a trace that does not say its torch."""
        lines: list[str] = []
        if self.told and self.recorded and simulated_torch(self.told) != simulated_torch(self.recorded):
            by = f" ({{{self.told_by}}})" if self.told_by else ""
            lines.append(OptionText("the trace was recorded under torch {recorded}, replayed as torch {told}: the "
                                    "job's%s" % by, recorded=simulated_torch(self.recorded),
                                    told=simulated_torch(self.told)))
        note = simulation_note(self.told) if self.told else replay_note(self.recorded)
        return lines + ([note] if note else [])
