"""What `alloctune fit` says after the GPU disagreed with an answer, on the H200 fit whose confirmations disagreed
(tests/fixtures/fits/README.md): the replays and the GPU's runs read together, and `decide/fit.known` on the cases
they can make."""
from __future__ import annotations

import json
import re
from pathlib import Path

from rich.console import Console

from alloctune.decide.fit import Known, known
from alloctune.report.fits import print_fit
from alloctune.results.fits import FitFile

CONFIRMED = Path(__file__).parents[1] / "fixtures" / "fits" / "hf-trainer-gpt2-confirmed.json"


def test_after_a_disagreement_the_largest_value_known_to_run_is_said():
    fit = FitFile.from_json(json.loads(CONFIRMED.read_text()), str(CONFIRMED))
    console = Console(record=True, width=100)
    print_fit(console, fit)
    text = " ".join(console.export_text().split())
    assert "default: the GPU disagreed; the largest known to run is 16 (its replay), 24 does not run on the GPU." \
        in text
    assert ("expandable_segments:True: the GPU disagreed; the largest known to run is 32 (its replay), 40 does not "
            "run on the GPU.") in text
    assert text.count("the GPU disagreed") == 2   # the two answers the GPU agreed with say nothing more


def test_known_reads_the_replays_and_the_gpu_together():
    replayed = [(8, True), (16, True), (32, False)]
    assert known(replayed, [(24, False), (32, False)]) == Known(16, False, 24)
    assert known(replayed, [(24, True), (32, False)]) == Known(24, True, 32)
    assert known(replayed, [(40, True)]) == Known(40, True, None)           # more than predicted ran
    assert known([(8, False)], [(4, False)]) == Known(None, False, 4)
    assert known([(8, True), (16, True)], [(12, False)]) == Known(8, False, 12)   # the GPU's word wins over 16's replay


def test_where_the_search_met_the_gpus_own_answer_is_said_against_the_prediction():
    data = json.loads(CONFIRMED.read_text())
    over = data["limits"][1]   # 63.71 GiB: expandable segments' 40 retried an allocation
    over["confirmed"].append({"conf": "expandable_segments:True", "value": 32, "predicted_runs": True, "state": "ok",
                              "runs": True, "peak_reserved_bytes": 52 * 2**30, "num_alloc_retries": 0,
                              "searched": True})
    fit = FitFile.from_json(data, str(CONFIRMED))
    console = Console(record=True, width=100)
    print_fit(console, fit)
    text = " ".join(console.export_text().split())
    assert ("expandable_segments:True: the GPU disagreed; on the GPU the largest batch that runs is 32 (40 does "
            "not), against 40 predicted.") in text
    assert "3 of 4 agreed; 1 run more searched" in text   # a search run is no check of the answer
    assert "(search)" in text


def test_the_plot_shows_what_the_gpu_measured_where_it_confirmed(tmp_path):
    from dataclasses import replace

    from alloctune.report.fits import plot_fit

    fit = FitFile.from_json(json.loads(CONFIRMED.read_text()), str(CONFIRMED))
    bare = replace(fit, limits=[replace(lim, confirmed=[]) for lim in fit.limits])
    with_gpu, without = plot_fit(fit, tmp_path / "gpu.png"), plot_fit(bare, tmp_path / "bare.png")
    assert with_gpu.read_bytes() != without.read_bytes() and with_gpu.stat().st_size > 10_000


def numbering(text: str) -> list[tuple[list[int], list[int]]]:
    """Per table that numbers settings, the numbers down its rows and those of the lines below it that give each
    setting whole."""
    tables: list[tuple[list[int], list[int]]] = []
    for line in text.splitlines():
        if m := re.match(r" \((\d+)\) ", line):      # a row: its setting's number in the first column
            if not tables or tables[-1][1]:
                tables.append(([], []))
            tables[-1][0].append(int(m[1]))
        elif m := re.match(r"  \((\d+)\) \S", line):   # below the table: the setting whole
            tables[-1][1].append(int(m[1]))
    return tables


def test_each_table_numbers_its_settings_in_order_and_gives_each_once_below_it():
    """Each table numbers its own settings. Before, the curves numbered three settings and each budget's answers
    five in one numbering, so the budget's rows read (4), (1), (2), (5), (3), and a setting confirmed at two values
    was given whole twice below its table."""
    fit = FitFile.from_json(json.loads(CONFIRMED.read_text()), str(CONFIRMED))
    for width, counts in ((80, [3, 5, 5]), (60, [8, 1, 1])):
        console = Console(record=True, width=width)
        print_fit(console, fit)
        tables = numbering(console.export_text())
        assert [len(below) for _, below in tables] == counts, width
        for rows, below in tables:
            assert below == list(range(1, len(below) + 1)) == sorted(set(rows)), (width, rows, below)
            assert rows == sorted(rows)
