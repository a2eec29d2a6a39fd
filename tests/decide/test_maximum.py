"""What a job of several processes needs per GPU (decide/maximum.py): per setting, the trace that needs the most,
the OOMs of every trace, in the order of settings by memory (results/order.by_memory)."""
from __future__ import annotations

from alloctune.decide.maximum import TraceFigures, maximum
from alloctune.settings.conf import AllocConf

DEFAULT, ES, MS = AllocConf(), AllocConf.parse("expandable_segments:True"), AllocConf.parse("max_split_size_mb:128")
ES_MS = AllocConf.parse("expandable_segments:True,max_split_size_mb:128")


def test_the_maximum_over_ranks_counts_every_ranks_ooms():
    """The job fails where any rank does: a rank that ran out of memory below the highest peak still counts."""
    [row] = maximum([TraceFigures("rank0", DEFAULT, 10, 0), TraceFigures("rank1", DEFAULT, 8, 2)])
    assert (row.trace, row.peak_reserved_bytes, row.num_ooms) == ("rank0", 10, 2)
    assert row.to_json() == {"conf": "default", "peak_reserved_bytes": 10, "num_ooms": 2, "trace": "rank0",
                             "measured_peak_reserved_bytes": None}


def test_the_highest_trace_keeps_its_gpu_figure_and_the_first_of_equals_wins():
    rows = maximum([TraceFigures("rank0", ES, 10, 0, measured_peak_reserved_bytes=11),
                    TraceFigures("rank1", ES, 10, 0, measured_peak_reserved_bytes=12)])
    assert [(r.trace, r.measured_peak_reserved_bytes) for r in rows] == [("rank0", 11)]


def test_settings_that_fit_come_first_by_their_highest_peak_then_the_simpler():
    figures = [TraceFigures("rank0", s, peak, ooms) for s, peak, ooms in
               ((DEFAULT, 30, 1), (ES_MS, 12, 0), (MS, 12, 0), (ES, 20, 0))]
    figures += [TraceFigures("rank1", s, 5, 0) for s in (DEFAULT, ES_MS, MS, ES)]
    assert [r.setting for r in maximum(figures)] == [MS, ES_MS, ES, DEFAULT]
