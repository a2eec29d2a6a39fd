"""What `alloctune fit` says its answers rest on: how many are exact and what was recorded to make them so (or why
nothing was), where a curve still decides its margin and the values it came from, and copies at once run together
on the GPU; on the answers of real replays of H100 recordings (tests/fixtures/fits/README.md)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rich.console import Console

from clirun import in_process

import alloctune
from alloctune.report.fits import print_fit
from alloctune.results.fits import CopiesConfirmation, CopyRun, ExactRecord, FitFile, Unrecorded

FIXTURES = Path(__file__).parents[1] / "fixtures" / "fits"
GiB = 2**30


def gpt2(*batches: int, **kw) -> FitFile:
    traces = {b: FIXTURES / f"gpt2-h100-batch-{b}.xz" for b in batches}
    return alloctune.fit("batch", traces=traces, confs=["default"], jobs=1, **kw).fit


def said(fit: FitFile) -> str:
    console = Console(record=True, width=100)
    print_fit(console, fit)
    return " ".join(console.export_text().split())


def test_curve_answers_say_so_and_give_each_margin_with_the_values_it_came_from():
    text = said(gpt2(2, 4, 6, budgets=["20GiB"]))
    assert "Answers at values not recorded are the curve's (fitted to traces recorded before: no command to " \
           "record at the answers)." in text
    assert "default: +15.0%, the leave-one-out error of its line through batch 2, 4, 6 (each predicted from the " \
           "others; batch 2 missed most)" in text
    assert "default 8 extrapolated +15.0%" in text
    two = said(gpt2(2, 4, budgets=["12GiB"]))
    assert "default: none, its line meets batch 2, 4 (too few values for a leave-one-out: nothing tested the " \
           "curve)" in two


def test_exact_answers_say_what_was_recorded_and_why_the_others_are_not():
    fit = gpt2(2, 4, 6, 8, budgets=["12GiB", "20GiB"])   # exact under 12 GiB (6 runs, 8 does not); not under 20 GiB
    made = replace(fit, exact=ExactRecord(3, [6, 8], [Unrecorded(10, "python3 exited with status 1: [OOM]")], [96]))
    text = said(made)
    assert "To answer from replays, recorded 2 more values (6, 8) of at most 3: 1 of 2 answers are exact." in text
    assert "batch=10: not recorded: python3 exited with status 1: [OOM]" in text
    assert "batch 96: beyond what the recording GPU holds, not recorded." in text
    assert "The other answers rest on the curve: the 3 recordings allowed were made (--extra-recordings)." in text
    assert "replays: exact, the value and the next one recorded and replayed (1 of 1)" in text
    assert "default 6 replays - 0.33 8" in text
    assert "Where the curve decides" in text and "default: +4.7%" in text   # only for the answer still the curve's


def test_the_values_recorded_and_those_that_failed_are_said_in_order_of_value():
    """They were said as recorded, as the search for each answer went: "recorded 2 more values (8, 6)"."""
    fit = gpt2(2, 4, 6, 8, budgets=["12GiB"])
    failed = [Unrecorded(12, "python3 exited with status 1: [OOM]"), Unrecorded(10, "timed out")]
    text = said(replace(fit, exact=ExactRecord(4, [8, 6], failed)))
    assert "recorded 2 more values (6, 8) of at most 4" in text
    assert text.index("batch=10: not recorded: timed out") < text.index("batch=12: not recorded")


def test_copies_run_together_say_how_many_ran_and_whether_the_gpu_agreed():
    fit = gpt2(2, 4, 6, budgets=["12GiB"])
    [limit] = fit.limits
    ran = CopyRun("ok", True, 5 * GiB, 0)
    retried = CopyRun("ok", False, 6 * GiB, 2)
    copies = [CopiesConfirmation("", 2, 2, 13 * GiB, [ran, retried]),
              CopiesConfirmation("", 4, 1, None, [], "the GPU has 3.00 GiB free, less than the 12.72 GiB to leave")]
    assert (copies[0].said, copies[0].agreed, copies[1].said) == (False, False, None)
    text = said(replace(fit, limits=[replace(limit, copies_confirmed=copies)]))
    assert "Copies at once on the GPU under budget 12GiB, 13.00 GiB left free for them (the budget and one context)" \
        in text
    assert "default 2 2 1 of 2 ran (2 alloc retries) 5.00/6.00 NO" in text
    assert "default 4 1 not run - -" in text
    assert "default: not run: the GPU has 3.00 GiB free, less than the 12.72 GiB to leave" in text


def test_two_values_are_not_said_to_have_a_weak_leave_one_out_they_have_none():
    """It said 'With 2 recorded values a leave-one-out predicts each from 1 others' beside 'too few values for a
    leave-one-out: nothing tested it'."""
    text = said(gpt2(2, 4, budgets=["12GiB"]))
    assert "nothing tested the curve" in text and "predicts each from" not in text
    three = said(gpt2(2, 4, 6, budgets=["12GiB"]))
    assert "With 3 recorded values a leave-one-out predicts each from 2 others" in three


def test_the_curves_of_five_values_fit_80_columns():
    """The curve's words ('parabola in batch') never wrapped: the table took 125 columns, settings numbered or not."""
    confs = ["default", "expandable_segments:True", "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"]
    traces = {b: FIXTURES / f"gpt2-h100-batch-{b}.xz" for b in (2, 4, 6, 8, 12)}
    fit = alloctune.fit("batch", traces=traces, confs=confs, cards=["24GiB"], jobs=1).fit
    assert any(len(s.reserved.coefficients) == 3 for s in fit.settings if s.reserved)   # a parabola among them
    console = Console(record=True, width=80)
    print_fit(console, fit)
    lines = console.export_text().splitlines()
    assert max(map(len, lines)) <= 80, "\n".join(line for line in lines if len(line) > 80)
    assert any(line.endswith(") roundup_power2_divisions:[256:1,512:2,1024:4,>:8]") for line in lines)   # whole


def test_copies_at_once_are_said_to_count_each_copy_as_the_rule_counts_it():
    """decide/fit.copies counts each copy at its peak without a limit (one process cannot take another's cache),
    not at its least room: the words under the table name that peak (they said 'least room')."""
    fit = gpt2(2, 4, 6, budgets=["20GiB"])
    [answer] = fit.limits[0].answers
    peak = fit.settings[0].points[0].peak_reserved_bytes
    assert answer.copies[0] == (20 * GiB + fit.overhead_bytes) // (peak + fit.overhead_bytes)
    words = said(fit)
    assert "each at its peak without a limit and its context" in words and "each in its least room" not in words


def test_a_dry_runs_words_match_each_answers_basis_and_its_made_up_values_are_not_the_parameters():
    """A dry run's fit said 'every answer is predicted' beside answers its replays decided, and 'from 11 values
    (8, ..., 8192) ... (11 values made up)' of the batches and of what the script read from the GPU alike."""
    from alloctune.results.provenance import DryRunSaid

    fit = gpt2(2, 4, 6, 8, budgets=["12GiB"])
    dry = replace(fit, dry_run=DryRunSaid("NVIDIA H100 80GB HBM3", "sm90", "torch 2.11 sm90", 4, {"item": 4}, 0,
                                          None))
    [answer] = dry.limits[0].answers
    assert answer.basis == "replayed"
    text = said(dry)
    assert "Peak memory in batch, traced at batch 2, 4, 6, 8 by a dry run for NVIDIA H100 80GB HBM3 (table row " \
           "torch 2.11 sm90; made up 4 values the script read from the GPU: item 4): nothing was measured;" in text
    assert "values made up" not in text and "every answer is predicted" not in text
    assert "the dry runs measured nothing: confirm an answer on a GPU" in text
    words = " ".join(in_process("fit", "--help", env={"COLUMNS": "200"}).stdout.split())
    assert "answers come from the dry runs' replays, else from the curve; nothing is measured" in words
    assert "every figure is predicted" not in words
