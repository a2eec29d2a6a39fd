"""Measuring a GPU's driver-call costs (`measure`) and keeping them for reuse (`calibration_for`).

`measure` runs the calibration child (child/calibration.py) under the job's interpreter, on one GPU: with the
default allocator (cudaMalloc, cudaFree, a synchronisation) and under expandable_segments:True (mapping and
unmapping pages), each in a fresh process, as a process has one allocator configuration; `RUNS` pairs of them in
turn, pooled size by size (`pooled`). About 40 s in all on an H100, most of it torch imports.

The per-user store is a folder of JSON files, one per GPU model, driver, torch and host CPU (what the costs depend
on: two H100 machines of one driver and torch priced every call about 2 times apart, the cheaper one's host issuing
a job's step in about half the time, so a store in a home directory shared between hosts must not hand one host's
prices to another):
`$XDG_CACHE_HOME/alloctune/calibration/` (`~/.cache/...` where that is unset). `calibration_for` is what a sweep
calls: the stored calibration for its GPU on this host, or a new one measured and stored. A sweep keeps a copy of
what it used in its results folder (results/names.CALIBRATION_FILE).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from statistics import median

from ..errors import AlloctuneError, ResultsError
from ..processes import spawn_group
from ..results.calibration import (CALIBRATION_SCHEMA, COST_KINDS, BusyFit, Calibration, CostFit, CostSample,
                                  read_calibration, write_calibration)
from ..results.typed import from_json, loads
from ..settings.conf import AllocConf
from ..child.calibration import MARK, NO_GPU_EXIT, Answer, fit
from ..child.provenance import host_cpu
from .probe import ProbeResult
from .task import child_environment

TIMEOUT_S = 120   # one child: a torch import and CUDA's start, then a few seconds of measuring
# Children of each mode, their figures pooled: one process's busy-device prices moved up to 4 times between five
# processes on one H100 within minutes (a busy cudaMalloc 32 to 121 us; the idle ones within 15%:
# results/h100-calibration-repeat-2026-12-06), so one process is one draw of them. Pooling keeps one process far off
# from setting a price; calibrations minutes apart still differ as much (results/h100-calibration-pooled-2026-12-07).
RUNS = 3


def measure(python: str = sys.executable, gpu: int = 0, runs: int = RUNS) -> Calibration:
    """The driver-call costs of GPU `gpu` as `python`'s torch sees them, measured now by `runs` pairs of children
    in turn. AlloctuneError (one line) when that interpreter sees no GPU or a measurement went wrong."""
    answers = [answer for _ in range(runs) for answer in (
        _child(python, gpu, "native", AllocConf()),
        _child(python, gpu, "expandable", AllocConf(expandable_segments=True)))]
    return from_answers(answers, python)


def from_answers(answers: list[Answer], python: str) -> Calibration:
    """The calibration of the children's answers (all run under `python`), each kind pooled over the children
    that measured it (`pooled`), dated now. AlloctuneError when they saw different GPUs or software, or a kind is
    missing."""
    facts = answers[0].facts
    if other := next((a.facts for a in answers if a.facts != facts), None):
        raise AlloctuneError(f"the calibration runs saw different GPUs or software: {facts} and {other}")
    measured = {kind: [a.fits[kind] for a in answers if kind in a.fits] for kind in COST_KINDS}
    missing = [kind for kind, fits in measured.items() if not fits]
    if missing:
        raise AlloctuneError(f"the calibration child under {python} measured no {', '.join(missing)}")
    return Calibration(schema=CALIBRATION_SCHEMA, gpu=facts.gpu, driver=facts.driver, cuda=facts.cuda,
                       torch=facts.torch, measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       host_cpu=facts.host_cpu, **{kind: pooled(fits) for kind, fits in measured.items()})


def calibration_for(target: ProbeResult, gpu: int = 0) -> Calibration:
    """The calibration of `target`'s GPU `gpu` (an index into the GPUs it sees) from the per-user store, or
    measured now and stored there. The store is looked up under this host's CPU: this runs where the calibration
    child would (the sweep's executor). A stored file that cannot be read is measured again, with a warning; one
    from before calls were timed on a busy device, without; one from before the host's CPU was kept is not found
    under its new name, and is measured again too (about 40 s). A stored one's lines are today's (`refitted`)."""
    if not target.cuda_available or gpu >= len(target.devices):
        raise AlloctuneError(f"calibrating needs CUDA GPU {gpu}, and {target.python} sees no such GPU")
    path = store_path(target.devices[gpu]["name"], target.driver, target.torch_version, host_cpu())
    if path.is_file():
        try:
            stored = read_calibration(path)
        except ResultsError as exc:
            warnings.warn(f"{exc}; measuring again")
        else:
            if stored.busy_measured:   # else from before the busy device was timed: measured again (about 40 s)
                return refitted(stored)
    calibration = measure(target.python, gpu)
    store(calibration)
    return calibration


def pooled(fits: list[CostFit]) -> CostFit:
    """One kind as several processes measured it: at each size the median of their medians (and of their
    quartiles), its repeats all of theirs; the line (`fit`) through those, idle and busy (whose share waited for is
    their median too). One process's draw far off the others' leaves the pooled figure where the rest are."""
    def samples(each: list[list[CostSample]]) -> list[CostSample]:
        sizes: dict[int, list[CostSample]] = {}
        for run in each:
            for sample in run:
                sizes.setdefault(sample.bytes, []).append(sample)
        return [CostSample(bytes=size, runs=sum(s.runs for s in at), median_us=median(s.median_us for s in at),
                           low_us=median(s.low_us for s in at), high_us=median(s.high_us for s in at))
                for size, at in sorted(sizes.items())]

    idle = fit(samples([f.samples for f in fits]))
    busy = [f.busy for f in fits if f.busy is not None]
    if len(busy) < len(fits):   # a child from before the busy device was timed: none pooled
        return idle
    busy_line = fit(samples([b.samples for b in busy]))
    return replace(idle, busy=BusyFit(fixed_us=busy_line.fixed_us, per_mib_us=busy_line.per_mib_us,
                                      samples=busy_line.samples, waits=median(b.waits for b in busy),
                                      queued_us=busy[0].queued_us))


def refitted(calibration: Calibration) -> Calibration:
    """`calibration` with every kind's idle and busy line fitted again to its own samples by today's `fit` (each
    kind pooled from itself alone): a stored calibration from before the line was the repeated median prices as a
    new one would."""
    c = calibration
    return replace(c, device_alloc=pooled([c.device_alloc]), device_free=pooled([c.device_free]),
                   map=pooled([c.map]), unmap=pooled([c.unmap]), sync=pooled([c.sync]))


def store(calibration: Calibration) -> Path:
    """Keep `calibration` in the per-user store, under its GPU, driver, torch and host CPU; the file's path."""
    path = store_path(calibration.gpu, calibration.driver, calibration.torch, calibration.host_cpu)
    write_calibration(path, calibration)
    return path


def store_path(gpu: str, driver: str | None, torch: str, cpu: str | None) -> Path:
    """Where the per-user store keeps the calibration of this GPU model, driver, torch and host CPU."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    name = re.sub(r"[^A-Za-z0-9.+_-]+", "_",
                  f"{gpu}-driver-{driver or 'unknown'}-torch-{torch}-cpu-{cpu or 'unknown'}")
    return Path(cache) / "alloctune" / "calibration" / f"{name}.json"


def _child(python: str, gpu: int, mode: str, conf: AllocConf) -> Answer:
    """One calibration child's answer."""
    env = child_environment(conf, gpu)
    try:
        with spawn_group([python, "-m", "alloctune.child.calibration", mode], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
            try:
                out, err = child.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise AlloctuneError(f"calibrating under {python} took longer than {TIMEOUT_S} s") from None
    except OSError as exc:
        raise AlloctuneError(f"cannot run Python interpreter {python}: {exc}") from None
    if child.returncode == NO_GPU_EXIT:
        raise AlloctuneError(f"calibrating needs a CUDA GPU, and {python} sees none")
    return answer_of(out.decode(errors="replace"), err.decode(errors="replace"), child.returncode,
                     f"the calibration child ({mode}) under {python}")


def answer_of(out: str, err: str, returncode: int, where: str) -> Answer:
    """A calibration child's `Answer` from its stdout (the last MARK line), stderr and exit code; AlloctuneError
    (one line, naming `where`) when it failed."""
    answers = [line[len(MARK):] for line in out.splitlines() if line.startswith(MARK)]
    answer = loads(answers[-1], where, AlloctuneError) if answers else {}
    if returncode != 0 or not isinstance(answer, dict) or "fits" not in answer:
        said = answer.get("error") if isinstance(answer, dict) else None
        last = (err.strip().splitlines() or [""])[-1]
        raise AlloctuneError(f"{where} failed: {said or last or f'exit code {returncode}'}")
    return from_json(Answer, answer, where, AlloctuneError)
