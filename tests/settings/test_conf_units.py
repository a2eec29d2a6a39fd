"""Allocator setting strings, sizes and the trials file: parse, print back, refuse."""
from __future__ import annotations

import json

import pytest

from alloctune.errors import ConfError, ResultsError, SizeError
from alloctune.results.records import Measurement, TrialRecord, TrialState
from alloctune.results.trials import TrialStore
from alloctune.settings.conf import AllocConf, canonical
from alloctune.units import (GiB, MiB, budget_on, budget_share, format_bytes, format_number, parse_budget,
                             parse_size)


@pytest.mark.parametrize("text, canonical_form, keys", [
    ("", "", 0),
    ("default", "", 0),
    ("max_split_size_mb:128,expandable_segments:True", "expandable_segments:True,max_split_size_mb:128", 2),
    (" roundup_power2_divisions : [256:1, 512:2, >:8] ", "roundup_power2_divisions:[256:1,512:2,>:8]", 1),
    ("garbage_collection_threshold:0.60", "garbage_collection_threshold:0.6", 1),
    ("backend:cudaMallocAsync", "backend:cudaMallocAsync", 1),
    ("pinned_use_host_register:True,expandable_segments:False", "expandable_segments:False,pinned_use_host_register:True",
     2),
])
def test_settings_print_back_canonically(text, canonical_form, keys):
    conf = AllocConf.parse(text)
    assert str(conf) == canonical_form and conf.complexity == keys
    assert AllocConf.parse(str(conf)) == conf and conf.label == (canonical_form or "default")


@pytest.mark.parametrize("text, message", [
    ("expandable_segments:true", "'True' or 'False'"),
    ("max_split_size_mb", "key:value"),
    ("max_split_size_mb:big", "whole number"),
    ("max_split_size_mb:-5", "positive"),
    ("roundup_power2_divisions:3", "power of two"),
    ("roundup_power2_divisions:[256:1,300:2]", "power of two"),
    ("roundup_power2_divisions:[256:1", "unbalanced"),
    ("garbage_collection_threshold:1.5", "[0, 1]"),
    ("backend:magic", "native"),
    ("max_split_size_mb:128,max_split_size_mb:256", "twice"),
])
def test_bad_settings_are_refused_with_the_reason(text, message):
    with pytest.raises(ConfError, match=message.replace("[", r"\[").replace("]", r"\]")):
        AllocConf.parse(text)


def test_canonical():
    assert canonical("max_split_size_mb:128,expandable_segments:True") == "expandable_segments:True,max_split_size_mb:128"
    assert canonical("not a setting") == "not a setting"  # kept as written (a skipped setting's name)


@pytest.mark.parametrize("text, expected", [
    ("143771MiB", 143771 * MiB), ("24GiB", 24 * GiB), ("24G", 24 * GiB), ("512MB", 512 * 10**6),
    ("1.5GiB", int(1.5 * GiB)), ("1000", 1000), (4096, 4096),
])
def test_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["lots", "24 GiBs", "-1GiB", True, -3])
def test_bad_sizes(text):
    with pytest.raises(SizeError):
        parse_size(text)


def test_budgets_are_sizes_or_fractions_never_a_few_bytes():
    assert parse_budget("24GiB") == (24 * GiB, None)
    assert parse_budget("0.5") == (None, 0.5) and parse_budget("1") == (None, 1.0)
    assert parse_budget(str(24 * GiB)) == (24 * GiB, None)
    for nonsense in ("2", "24", "0", "-0.5"):
        with pytest.raises(SizeError):
            parse_budget(nonsense)


def test_a_budget_on_a_device_as_a_share_and_in_bytes():
    assert budget_share(20 * GiB, None, 80 * GiB) == 0.25
    assert budget_share(200 * GiB, None, 80 * GiB) == 1.0   # more than the device: all of it
    assert budget_share(None, 0.5, 80 * GiB) == 0.5 and budget_share(None, None, 80 * GiB) is None
    assert budget_on(None, 0.25, 80 * GiB) == 20 * GiB and budget_on(24 * GiB, None, 80 * GiB) == 24 * GiB
    assert budget_on(None, None, 80 * GiB) is None


def test_format_bytes():
    assert format_bytes(None) == "-" and format_bytes(512) == "512 B"
    assert format_bytes(1536 * MiB) == "1.50 GiB" and format_bytes(3 * MiB) == "3.00 MiB"


def record(conf="", repeat=0):
    return TrialRecord(workload="w", workload_hash="h", conf=conf, repeat=repeat, env_id="e", backend="cuda",
                       state=TrialState.OK, measurement=Measurement(peak_reserved_bytes=2, peak_allocated_bytes=1))


def test_trials_file_round_trip_and_refusals(tmp_path):
    store = TrialStore(tmp_path / "trials.jsonl")
    assert store.load() == [] and store.finished_keys() == set()
    store.append(record())
    store.append(record("expandable_segments:True"))
    assert store.load() == [record(), record("expandable_segments:True")]
    lines = store.path.read_text().splitlines()
    future = dict(json.loads(lines[0]), schema=99)
    store.path.write_text(json.dumps(future) + "\n" + lines[1] + "\n")
    with pytest.raises(ResultsError, match="schema version 99"):
        store.load()
    store.path.write_text("not json\n" + lines[1] + "\n")
    with pytest.raises(ResultsError, match="not valid JSON"):
        store.load()


def test_a_torn_last_line_is_cut_before_the_next_append(tmp_path):
    store = TrialStore(tmp_path / "trials.jsonl")
    store.append(record())
    with open(store.path, "a") as f:
        f.write('{"workload": "w", "conf')  # killed mid-write
    with pytest.warns(UserWarning, match="truncated"):
        assert store.load() == [record()]
    store.append(record(repeat=1))
    assert store.load() == [record(), record(repeat=1)]  # no warning: the torn line is gone


@pytest.mark.parametrize("value, text", [(0.0336, "0.0336"), (0.0, "0"), (20.62, "20.6"), (99.96, "100"),
                                         (243175.3, "243,175"), (-0.5, "-0.5")])
def test_format_number_keeps_small_rates_readable(value, text):
    assert format_number(value) == text   # a command's 0.0336 runs/s once printed as '0 runs/s'
