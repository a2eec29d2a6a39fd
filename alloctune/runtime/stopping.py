"""The automatic window of a confirmation trial (`TrialTask.early_stop`): when the steps after the warm-up have been
timed well enough (`enough`, the one rule), and how every process of the job agrees on the step at which they all
stop (`SharedStop`), so that the ranks of a torchrun job end together as they do at a --steps window's step.

Why these figures. The window's memory is what the replay of the recording already predicted for the whole run, so
the confirmation is there for its speed: the rate over the window, paired with the default's. Within one trial
that rate's precision beyond about 1% buys little: the decision's margin is the 2% --max-slowdown, and one
setting's rate already moves by up to 1.2% between processes on a steady workload (docs/evidence.md), more on a
user's command. So the window ends once

- the relative standard error of the mean steady step time, from the host's step ends, is at most 1%
  (`TARGET_ERROR`): steps of variable-shape batches vary, and a rate over n of them with coefficient of variation
  c is known to c/√n (10% → 100 steps, 30% → 900), while periodic costs (collections, logging, a data loader
  refilling) show in that spread once they occur;
- at least 20 steady steps were timed (`MIN_STEADY_STEPS`): the spread's own estimate is then within about ±16%
  (1/√(2·19)), good enough to trust the 1%;
- at least 5 s of steady time passed (`MIN_STEADY_SECONDS`): the window then spans GPU clock and power settling
  of the first seconds under load and more than one period of what a job does every few seconds, and its two
  synchronised ends are exact to well under 0.1% of it.

Standard library only: this runs inside every Python process of the user's job.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

MIN_STEADY_STEPS = 20
MIN_STEADY_SECONDS = 5.0
TARGET_ERROR = 0.01
# The stop is proposed this many steps past the step that met the rule: a rank can be a step ahead of another when
# every step holds a collective, and must still be short of the stop when it reads it.
AHEAD_STEPS = 2
STOP_FILE = "stop-step"   # in the hook's folder (ALLOCTUNE_HOOK_OUT), beside the processes' reports


@dataclass
class Spread:
    """Running sums of step durations (seconds), for their mean and spread."""

    n: int = 0
    total: float = 0.0
    squares: float = 0.0

    def add(self, seconds: float) -> None:
        self.n += 1
        self.total += seconds
        self.squares += seconds * seconds

    def absorb(self, other: Spread) -> None:
        self.n += other.n
        self.total += other.total
        self.squares += other.squares

    def relative_error(self) -> float | None:
        """The standard error of the mean duration over the mean; None below two durations or a zero mean."""
        if self.n < 2 or self.total <= 0:
            return None
        mean = self.total / self.n
        variance = max(0.0, (self.squares - self.n * mean * mean) / (self.n - 1))
        return math.sqrt(variance / self.n) / mean


def enough(steps: int, seconds: float, spread: Spread) -> bool:
    """Whether `steps` steady steps over `seconds` of host time, whose durations are `spread`, time the rate well
    enough to end a confirmation trial (the rule and its figures: the module's docstring)."""
    error = spread.relative_error()
    return (steps >= MIN_STEADY_STEPS and seconds >= MIN_STEADY_SECONDS and error is not None
            and error <= TARGET_ERROR)


class SharedStop:
    """The step at which every process of one trial stops, kept in a file of the hook's folder: the first process
    whose steps meet the rule proposes one (`propose`), every other reads it (`read`) and stops there too."""

    def __init__(self, folder: str):
        self.path = os.path.join(folder, STOP_FILE)

    def propose(self, step: int) -> int:
        """Stop at `step` unless another process proposed first: the step agreed on. A hard link makes the file
        whole or absent, and of two proposals at once one only."""
        temporary = f"{self.path}.{os.getpid()}"
        with open(temporary, "w") as f:
            f.write(str(step))
        try:
            os.link(temporary, self.path)
        except FileExistsError:
            pass
        finally:
            os.unlink(temporary)
        agreed = self.read()
        return step if agreed is None else agreed

    def read(self) -> int | None:
        """The step agreed on; None while none is."""
        try:
            with open(self.path) as f:
                text = f.read()
        except FileNotFoundError:
            return None
        return int(text) if text.isdigit() else None
