"""What a decision taken again changed against the one a folder held (`alloctune report` says it): per decision group
(environment, backend, budget), the setting chosen before and after, with the trials and parameters each was taken
from, so that the words can say why (a user's other --max-slowdown, trials a resumed sweep added, or, with the same
of both, another alloctune's rules). Pure; the choices compared are choice.json's records, an older file's read through
its upgrade (results/upgrade.py)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..results.choices import ChoiceRecord
from ..results.records import decision_group
from ..results.vocabulary import setting_name


@dataclass(frozen=True)
class ChoiceChange:
    env_id: str
    backend: str
    budget_bytes: int | None
    before: str | None         # the setting chosen ('' the default); None: nothing fitted
    after: str | None
    trials: tuple[int, int]    # the trials each decision was taken from, before and after
    max_slowdown: tuple[float | None, float | None]   # None: a file from before the parameters were kept
    tie: tuple[float | None, float | None]

    def inputs_changed(self) -> dict[str, tuple[Any, Any]]:
        """What the decision was taken from that differs, before and after, by name ('trials', 'max_slowdown',
        'tie'), where the old file kept it (none: the change is the deciding code's own)."""
        kept = {"trials": self.trials if self.trials[0] else (None, None),   # 0: a file from before they were kept
                "max_slowdown": self.max_slowdown, "tie": self.tie}
        return {name: (a, b) for name, (a, b) in kept.items() if a is not None and a != b}

    def to_json(self) -> dict[str, Any]:
        """As `report --json` prints it: the settings named as every command's --json names them ("default");
        null where nothing fitted."""
        data = asdict(self)
        for side in ("before", "after"):
            data[side] = None if data[side] is None else setting_name(data[side])
        return data


def choice_changes(before: list[ChoiceRecord], after: list[ChoiceRecord]) -> list[ChoiceChange]:
    """Each group of `after` whose setting differs from the one `before` chose for it, in `after`'s order; a
    group new to the folder replaces nothing and is not a change."""
    held = {decision_group(c): c for c in before}
    return [ChoiceChange(c.env_id, c.backend.value, c.budget_bytes, was.conf, c.conf,
                         (was.trials_recorded, c.trials_recorded), (was.max_slowdown, c.max_slowdown),
                         (was.tie, c.tie))
            for c in after if (was := held.get(decision_group(c))) is not None and was.conf != c.conf]
