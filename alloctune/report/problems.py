"""A KNOWN_PROBLEM or KNOWN_CAVEAT reason's sentence (`known_problem`, for `words.py`), in the table of known
problems' own words (`settings/known.py`: `FEATURE_WORDS`, `SEVERITY_WORDS`, `features_phrase`).
"""
from __future__ import annotations

from ..decide.quoted import KnownProblem
from ..settings.known import PROBLEMS, SEVERITY_WORDS, features_phrase

_BY_ID = {p.id: p for p in PROBLEMS}


def known_problem(f: KnownProblem, head: str = "") -> str:
    """A setting's known problem for this job on its torch, as a reason says it, after `head`."""
    torch = f" on torch {f.torch_version}" if f.torch_version else " (its torch unknown: every version counted)"
    used = f"; the job {features_phrase(f.features)}" if f.features else ""
    return f"{head}known to {SEVERITY_WORDS[f.severity]}{torch} ({f.problem}{used}): {_BY_ID[f.problem].reason}"
