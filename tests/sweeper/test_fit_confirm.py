"""`fit --confirm`'s runs on the GPU (sweeper/fitrun.confirm) with the trial replaced by a job that fits up to a
value: the two checks of an answer, and the search where the GPU disagrees (decide/fit.search_next); and, with the
real trial, the refusal where no GPU is seen."""
from __future__ import annotations

import sys

import pytest

from alloctune.errors import AlloctuneError
from alloctune.results.fits import Answer, Confirmation, FitFile, LimitFit
from alloctune.sweeper import fitrun
from alloctune.trial.probe import probe

GiB = 2**30


def _fit(answer: tuple[int, int]) -> tuple[FitFile, Answer]:
    largest_value, next_value = answer
    a = Answer("", largest_value, "replayed", GiB, GiB, next_value, False, [True], [1])
    limit = LimitFit(80 * GiB, 40 * GiB, [a], budget="40GiB", budget_bytes=40 * GiB)
    return FitFile("batch", [8, 16, 32], 8, [], 0, False, 80 * GiB, [], [limit]), a


@pytest.mark.parametrize("fits_up_to, answer, runs", [
    (40, (24, 32), [24, 32, 40, 48]),     # more runs than predicted: up until a failure
    (16, (32, 40), [32, 40, 24, 16]),     # fewer: down until a run
    (8, (48, 56), [48, 56, 40, 32, 24]),  # three searched runs at most
    (24, (24, 32), [24, 32]),             # agreed: no search
])
def test_a_confirmation_searches_where_the_gpu_disagrees(monkeypatch, fits_up_to, answer, runs):
    ran = []

    def on_gpu(command, param, value, conf, limit, gpu, timeout_s, warmup_steps, steps, predicted, searched):
        ran.append(value)
        return Confirmation(str(conf), value, predicted, "ok", value <= fits_up_to, searched=searched)

    monkeypatch.setattr(fitrun, "_run", on_gpu)
    monkeypatch.setattr(fitrun, "refuse_without_gpu", lambda argv, **_: None)
    fit_file, a = _fit(answer)
    confirmed = fitrun.confirm(fit_file, ["job"], [a.setting], probes=probe).limits[0].confirmed
    assert ran == runs
    assert [c.searched for c in confirmed] == [False, False] + [True] * (len(runs) - 2)


def test_a_run_that_says_nothing_of_memory_stops_the_search_and_agrees_with_nothing(monkeypatch):
    def crashed(command, param, value, conf, limit, gpu, timeout_s, warmup_steps, steps, predicted, searched):
        return Confirmation(str(conf), value, predicted, "crashed", False, error="ModuleNotFoundError")

    monkeypatch.setattr(fitrun, "_run", crashed)
    monkeypatch.setattr(fitrun, "refuse_without_gpu", lambda argv, **_: None)
    fit_file, a = _fit((24, 32))
    confirmed = fitrun.confirm(fit_file, ["job"], [a.setting], probes=probe).limits[0].confirmed
    assert [(c.value, c.said, c.agreed) for c in confirmed] == [(24, None, None), (32, None, None)]


def test_confirming_without_a_gpu_is_refused_before_any_run():
    fit_file, a = _fit((24, 32))
    with pytest.raises(AlloctuneError, match="needs a CUDA GPU"):
        fitrun.confirm(fit_file, [sys.executable, "-c", "pass"], [a.setting], probes=probe)
