"""The names of the files in a results folder, and in a fit's: each spelled here once, and every module that
reads, writes or names one takes it from here. docs/DESIGN.md ("Results folder") lists them.

Standard library only, and nothing at all: any layer may name a file.
"""
from __future__ import annotations

# A sweep's folder.
SWEEP_FILE = "sweep.json"               # what was asked (`folder.SweepInfo`)
TRIALS_FILE = "trials.jsonl"            # what was measured, a line per trial (`trials.TrialStore`)
CHOICE_FILE = "choice.json"             # the decision per environment (`choices.ChoiceFile`)
SUMMARY_FILE = "summary.md"             # the decision in words (report/summary.py)
BEST_FILE = "best.env"                  # the chosen setting, for a finished sweep (report/analysis.py)
PLOT_FILE = "plot.png"                  # memory against throughput; a fit's folder names its plot the same
CALIBRATION_FILE = "calibration.json"   # the GPU's driver-call costs the sweep's predictions used (`calibration`)
TRACE_FILE = "trace.xz"                 # a hybrid sweep's recorded trace (a command's: one per process, named by
                                        # trial/job.trace_targets from this one: trace.rank<N>.xz, trace.pid<N>.xz)
SEARCH_FILE = "search.json"             # a hybrid sweep's search of the settings space (sweeper/hybrid.py)
LOCK_FILE = ".lock"                     # the writer lock (`folder.ResultsFolder.lock`)
PENDING_FILE = ".pending.json"          # a batch committed but not yet all in place (`batch`)

# A fit's folder.
FIT_FILE = "fit.json"                   # what `alloctune fit` answered (`fits.FitFile`)


def staged(name: str) -> str:
    """Where a batch writes the file `name` before it renames it into place (`batch.staged`)."""
    return f".{name}.staged"


def fit_trace(param: str, value: int) -> str:
    """The file a fit keeps its recording at `value` of `param` in."""
    return f"trace.{param}-{value}.xz"


def fit_trace_value(name: str, param: str) -> int | None:
    """The value of `param` a file named `name` holds a fit's recording at (`fit_trace`), else None."""
    head, tail = f"trace.{param}-", ".xz"
    digits = name[len(head):-len(tail)] if name.startswith(head) and name.endswith(tail) else ""
    return int(digits) if digits.isascii() and digits.isdigit() and len(digits) < 19 and int(digits) > 0 else None
