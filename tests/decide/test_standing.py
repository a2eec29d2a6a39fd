"""Which decision stands for export, as data (decide/standing.py): measured choices over simulated ones, and a
setting picked by hand accepted only where every trial of it ran and fitted in the choice's environment, the choice
otherwise kept and the refusal said by its data."""
from __future__ import annotations

from folders import choice, make_folder, repeats, trial

from alloctune.decide.standing import Refusal, hand_picked, standing
from alloctune.results.records import TrialState

ES, MS = "expandable_segments:True", "max_split_size_mb:128"
GC = "garbage_collection_threshold:0.6"


def test_measured_choices_supersede_simulated_ones():
    sim, cuda = choice(ES, env_id="sim:torch-2.11.0", backend="sim"), choice("")
    assert standing([sim, cuda]) == [cuda] and standing([sim]) == [sim]


def test_a_hand_picked_setting_is_accepted_where_it_ran_and_fitted(tmp_path):
    trials = repeats("") + repeats(ES, reserved=10.0) + [trial(MS, 0), trial(MS, 1, state=TrialState.OOM)]
    folder = make_folder(tmp_path / "r", trials, skipped=[(GC, "known upstream bug (#1)", "torch-2.11.0")])
    info, held = folder.info(), choice(ES)
    accepted = hand_picked(held, "", trials, info)
    assert accepted.refusal is None and accepted.choice is not None
    assert (accepted.choice.conf, accepted.choice.is_default, accepted.choice.env_id) == ("", True, held.env_id)
    failed = hand_picked(held, MS, trials, info)
    assert (failed.choice, failed.refusal, failed.trials) == (None, Refusal.FAILED, 2)
    assert [r.state for r in failed.failed] == [TrialState.OOM]
    skipped = hand_picked(held, GC, trials, info)
    assert (skipped.refusal, skipped.skipped.reason) == (Refusal.SKIPPED, "known upstream bug (#1)")
    other = hand_picked(choice(ES, env_id="torch-2.8.0"), ES, trials, info)   # it ran, but not there
    assert (other.refusal, other.ran) == (Refusal.NOT_RUN, ())
    unrun = hand_picked(held, "roundup_power2_divisions:4", trials, info)
    assert (unrun.refusal, unrun.ran) == (Refusal.NOT_RUN, ("", ES, MS))
