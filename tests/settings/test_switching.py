"""Which pairs of settings one process can switch between while it runs, and the strings that do it
(`settings/switching.py`), from the key registry's columns."""
from __future__ import annotations

import pytest

from alloctune.settings.conf import AllocConf
from alloctune.settings.switching import switch_strings

DEFAULT = AllocConf()


@pytest.mark.parametrize("conf, strings", [
    # persists: the default's string restores it
    ("expandable_segments:True", ("expandable_segments:True", "expandable_segments:False")),
    # reset by every parse that does not give it: the default is the empty string
    ("max_split_size_mb:128", ("max_split_size_mb:128", "")),
    ("roundup_power2_divisions:[256:1,512:2,>:4]", ("roundup_power2_divisions:[256:1,512:2,>:4]", "")),
    ("garbage_collection_threshold:0.6", ("garbage_collection_threshold:0.6", "")),
    ("expandable_segments:True,roundup_power2_divisions:4",
     ("expandable_segments:True,roundup_power2_divisions:4", "expandable_segments:False")),
    ("large_segment_size_mb:40", ("large_segment_size_mb:40", "large_segment_size_mb:20")),
])
def test_a_pair_torch_switches_in_place_gets_whole_strings_that_undo_each_other(conf, strings):
    assert switch_strings(AllocConf.parse(conf), DEFAULT, "2.11.0+cu130") == strings


@pytest.mark.parametrize("conf, torch", [
    ("expandable_segments:True", "2.8.0"),                        # the run-time parse before 2.9
    ("backend:cudaMallocAsync", "2.11.0"),                        # chosen once, when torch loads
    ("max_split_size_mb:128,max_non_split_rounding_mb:64", "2.11.0"),   # kept by a parse, no default to restore
    ("pinned_use_background_threads:True", "2.11.0"),             # not set in the parsing process
])
def test_other_pairs_are_measured_in_two_processes(conf, torch):
    assert switch_strings(AllocConf.parse(conf), DEFAULT, torch) is None
