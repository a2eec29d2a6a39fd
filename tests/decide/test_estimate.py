"""About how many GPU trials a sweep runs, told before any has (decide/estimate.py)."""
from __future__ import annotations

from dataclasses import replace

from alloctune.decide.estimate import Asked, first_estimate
from alloctune.decide.rounds import MIN_ROUNDS
from alloctune.settings.conf import AllocConf

DEFAULT, ASYNC = AllocConf(), AllocConf.parse("backend:cudaMallocAsync")
ES, MS, RP = (AllocConf.parse(c) for c in ("expandable_segments:True", "max_split_size_mb:128",
                                            "roundup_power2_divisions:4"))
CUDA = Asked(hybrid=False, recording=False, command=False, auto=False, confirm=False, rounds=3, finalists=2,
             searched=False, named=False, max_slowdown=0.02)
HYBRID = replace(CUDA, hybrid=True, recording=True)


def test_fixed_repeats_count_every_setting_planned_or_a_hybrids_finalists():
    grid = [DEFAULT, ES, MS, RP, ASYNC]
    assert first_estimate([grid], CUDA) == 5 * 3
    assert first_estimate([grid, grid], CUDA) == 2 * 5 * 3   # per environment
    assert first_estimate([grid], HYBRID) == (1 + 2 + 1) * 3   # the default, 2 finalists of 3, the backend switch
    assert first_estimate([grid], replace(HYBRID, command=True)) == 1 + (1 + 2 + 1) * 3   # the recording: extra


def test_with_confirm_a_hybrid_counts_the_pair_and_the_named_switchs_rounds():
    confirm = replace(HYBRID, confirm=True, auto=True, rounds=10)
    assert first_estimate([[DEFAULT, ES, MS]], confirm) == 1   # the recording is the default's first run
    assert first_estimate([[DEFAULT, ES, MS]], replace(confirm, command=True)) == 1 + 2
    assert first_estimate([[DEFAULT]], confirm) == 0   # nothing for the replay to judge
    assert first_estimate([[DEFAULT]], replace(confirm, searched=True)) == 1   # a search finds its own
    named = first_estimate([[DEFAULT, ES, ASYNC]], replace(confirm, named=True))
    assert named > first_estimate([[DEFAULT, ES, ASYNC]], confirm) == 1   # a switch named gets rounds


def test_auto_counts_the_first_default_run_and_the_rounds_estimate():
    auto = replace(CUDA, auto=True, rounds=10)
    one = first_estimate([[DEFAULT, ES]], auto)
    assert one >= 1 + MIN_ROUNDS and first_estimate([[DEFAULT, ES, MS]], auto) > one
    hybrid = replace(HYBRID, auto=True, rounds=10)
    # a hybrid measures one leader, whose memory the replay gives, however many settings it replays
    assert first_estimate([[DEFAULT, ES]], hybrid) == first_estimate([[DEFAULT, ES, MS, RP]], hybrid)
    assert first_estimate([[DEFAULT]], hybrid) == 1
