"""Answers made exact by recording: after the curve's first answers, the values that settle them are recorded (each
answer's value and the next one, where the bare curve puts them: decide/fit.to_record), replayed under every setting
and the answers taken again, a recording at a time, until every answer's value fits by its replay and the next does
not (decide/fit.Largest.exact), or `most` recordings were tried. A replay of a recording equals the GPU's peak to the
byte, so where the curve missed, the next answer walks from the replays a step at a time.

A value the recording GPU cannot hold (the curve of what its tensors need at once above its memory less the
context) is not tried; a recording that fails (the command crashed or ran out of memory at that value) is kept as
why, counts against `most`, and is not tried again. The recording itself is the caller's `Recorder` (on the GPU:
fitrun.record_value), so that a dry run can stand in for it.
"""
from __future__ import annotations

from typing import Callable

from ..decide.fit import to_record
from ..errors import AlloctuneError
from ..results.fits import ExactRecord, Unrecorded
from .fitting import Replays, TraceSource, estimates, recording_curve

Recorder = Callable[[int], "tuple[str, TraceSource]"]   # a value -> the recording's name and its trace (or path)
Say = Callable[[str], None]


def settle(replays: Replays, record: Recorder, most: int, say: Say = lambda line: None,
           doing: str = "recording") -> ExactRecord:
    """Record and replay (into `replays`) the values that make answers exact, at most `most` of them; `doing`: what
    `record` does, in progress lines ('dry run (no GPU)' for a dry run's)."""
    param = replays.request.param
    made: list[int] = []
    failed: list[Unrecorded] = []
    while len(made) + len(failed) < most:
        held, _ = _todo(replays, failed)
        if not held:
            break
        value = held[0]
        say(f"{param}={value}: {doing}, to answer from its replay ({len(made) + len(failed) + 1} of at most "
            f"{most})")
        try:
            name, source = record(value)
        except AlloctuneError as exc:   # a run that left no trace: the answers that needed it stay the curve's
            failed.append(Unrecorded(value, str(exc)))
            say(f"{param}={value}: not recorded: {exc}")
            continue
        replays.add(value, name, source)
        made.append(value)
    return ExactRecord(most, made, failed, _todo(replays, failed)[1])


def _todo(replays: Replays, failed: list[Unrecorded]) -> tuple[list[int], list[int]]:
    """The values still to record, in order, that the recording GPU is expected to hold, and those it is not."""
    todo = to_record(estimates(replays), replays.values, [u.value for u in failed])
    curve = recording_curve(replays)
    room = replays.request.device_bytes - replays.request.overhead_bytes
    held = [v for v in todo if curve is None or curve.at(v) <= room]
    return held, sorted(set(todo) - set(held))
