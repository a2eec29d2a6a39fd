import pytest

from alloctune.errors import ConfError
from alloctune.settings.conf import AllocConf
from alloctune.settings.versions import (
    BEHAVIOUR_CHANGES,
    NEWEST_KNOWN,
    behaviour,
    changes_between,
    check_conf,
    check_keys,
    parse_version,
)


@pytest.mark.parametrize("text, expected", [
    ("2.11.0+cu130", (2, 11, 0)),
    ("2.12.0.dev20260101", (2, 12, 0)),
    ("2.13.0+cpu", (2, 13, 0)),
    ("2.1", (2, 1, 0)),
    ("2.9.1", (2, 9, 1)),
    ("2.10.0a0+git1234", (2, 10, 0)),
    (" 2.4.1 ", (2, 4, 1)),
])
def test_parse_version(text, expected):
    assert parse_version(text) == expected


@pytest.mark.parametrize("bad", ["", "torch", "two.eleven", "2", None])
def test_parse_version_rejects_garbage_naming_it(bad):
    with pytest.raises(ConfError, match="torch version"):
        parse_version(bad)


def _check(text, version):
    return check_conf(AllocConf.parse(text), version)


@pytest.mark.parametrize("text, version", [
    ("", "2.0.0"),
    ("", "9.0.0"),
    ("max_split_size_mb:21", "2.1.0"),
    ("max_split_size_mb:20", "2.10.0"),
    ("max_split_size_mb:20", "2.11.0+cu130"),
    ("large_segment_size_mb:64,max_split_size_mb:64", "2.11.0"),
    ("expandable_segments:True", "2.1.0"),
    ("roundup_power2_divisions:[256:1,512:2,>:4]", "2.0.1"),
    ("garbage_collection_threshold:0.6", "2.1.0"),
    ("max_non_split_rounding_mb:20", "2.6.0"),
    ("per_process_memory_fraction:0.5", "2.10.0"),
    ("backend:cudaMallocAsync", "2.0.0"),
    ("some_future_key:1", "2.30.0"),     # newer than our table: torch's own parse decides
])
def test_check_conf_accepts(text, version):
    assert _check(text, version) is None


@pytest.mark.parametrize("text, version, words", [
    ("max_split_size_mb:20", "2.9.1", "> 20"),
    ("max_split_size_mb:19", "2.10.0", ">= 20"),
    ("max_split_size_mb:10", "2.11.0", ">= large_segment_size_mb (20)"),
    ("large_segment_size_mb:64,max_split_size_mb:32", "2.11.0", ">= large_segment_size_mb (64)"),
    ("large_segment_size_mb:64,max_non_split_rounding_mb:32", "2.13.0", "max_non_split_rounding_mb must be >= 64"),
    ("large_segment_size_mb:8", "2.11.0", "> 10"),
    ("large_segment_size_mb:64", "2.10.0", "large_segment_size_mb needs torch >= 2.11"),
    ("expandable_segments:True", "2.0.1", "expandable_segments needs torch >= 2.1"),
    ("max_non_split_rounding_mb:64", "2.5.1", "needs torch >= 2.6"),
    ("per_process_memory_fraction:0.5", "2.9.0", "needs torch >= 2.10"),
    ("roundup_bypass_threshold_mb:10", "2.0.0", "removed in torch 2.0"),
    ("garbage_collection_threshold:1.0", "2.11.0", "strictly between 0 and 1"),
    ("garbage_collection_threshold:0", "2.11.0", "strictly between 0 and 1"),
    ("foo:1", "2.11.0", "does not know the key 'foo'"),
    ("roundup_power2_divisions:[256:1,>:4]", "1.13.1", "list form"),
])
def test_check_conf_rejects_with_reason(text, version, words):
    reason = _check(text, version)
    assert reason is not None and words in reason


def test_check_keys_ignores_values():
    conf = AllocConf.parse("max_split_size_mb:10")
    assert check_keys(conf, "2.11.0") is None
    assert check_conf(conf, "2.11.0") is not None


def test_removed_key_is_fine_before_removal():
    assert _check("roundup_bypass_threshold_mb:10", "1.13.1") is None


def test_behaviour_switches():
    old, new = behaviour("2.3.1"), behaviour("2.11.0+cu130")
    assert not old.divisions_one_rounds_512 and new.divisions_one_rounds_512
    assert old.full_fraction_enables_gc and not new.full_fraction_enables_gc
    assert old.gt_overwrites_last_entry and not new.gt_overwrites_last_entry
    assert behaviour("2.4.0").divisions_one_rounds_512


def test_behaviour_changes_are_ordered_and_parse():
    versions = [parse_version(v) for v, _ in BEHAVIOUR_CHANGES]
    assert versions == sorted(versions)
    assert all(text for _, text in BEHAVIOUR_CHANGES)
    assert versions[-1] <= NEWEST_KNOWN


def test_changes_between_either_order():
    between = changes_between("2.9.1", "2.11.0+cu130")
    assert [v for v, _ in between] == ["2.10", "2.11"]
    assert changes_between("2.11.0", "2.9.1") == between
    assert changes_between("2.11.0", "2.11.0") == []
    assert any("1 means plain 512" in text for _, text in changes_between("2.3.0", "2.4.0"))


def test_simulation_note_says_what_a_replay_cannot_promise():
    from alloctune.settings.versions import simulation_note

    assert simulation_note("2.11.0+cu130") is None and simulation_note("2.1.2") is None
    assert "newer than 2.13" in simulation_note("2.15.0")
    assert "older than 2.1" in simulation_note("2.0.1")
