"""The registry of setting keys: one entry per key, which the setting string, the versions, the grid, the search
space and the simulator read."""
import sys
from dataclasses import fields

import pytest
from key_values import boundary_settings

from alloctune.errors import ConfError
from alloctune.settings.conf import AllocConf
from alloctune.settings.grid import apply_rules
from alloctune.settings.keys import KEYS, LARGEST, SEARCH_ORDER, Sim, names
from alloctune.settings.readback import conf_from_settings, mismatch, readable_keys
from alloctune.settings.versions import check_conf
from alloctune.sim.config import allocator_config
from alloctune.trial.probe import SettingsJudge

GiB = 1 << 30


def test_every_parsed_key_is_a_field_of_a_setting_in_the_tables_order():
    """AllocConf's fields are the keys KEYS gives a parser, in KEYS's order: the order a setting prints them in
    (files keep it), so neither can change alone."""
    parsed = [name for name in (f.name for f in fields(AllocConf)) if name != "extra"]
    assert parsed == list(names(lambda key: key.parse is not None))
    assert list(KEYS)[:len(parsed)] == parsed   # the parsed keys first
    assert all(KEYS[name].sim is Sim.MODELLED for name in parsed)
    assert str(AllocConf.parse(",".join(f"{name}:{raw}" for name, raw in reversed((
        ("backend", "native"), ("expandable_segments", "True"), ("max_split_size_mb", "64"),
        ("roundup_power2_divisions", "4"), ("garbage_collection_threshold", "0.6"),
        ("max_non_split_rounding_mb", "64"), ("large_segment_size_mb", "32"),
        ("per_process_memory_fraction", "0.5")))))) == (
        "backend:native,expandable_segments:True,max_split_size_mb:64,roundup_power2_divisions:4,"
        "garbage_collection_threshold:0.6,max_non_split_rounding_mb:64,large_segment_size_mb:32,"
        "per_process_memory_fraction:0.5")


def test_the_search_steps_through_every_searched_key_once():
    assert sorted(SEARCH_ORDER) == sorted(names(lambda key: key.search))


def test_a_key_a_parse_keeps_is_restored_to_its_default():
    """The probe's child parses these after a setting that names them (`Key.persists`), so the next setting starts
    from the allocator's defaults; those defaults are the ones the simulator and the version checks use."""
    assert {name: key.persists for name, key in KEYS.items() if key.persists} == {
        "expandable_segments": "False", "large_segment_size_mb": "20"}
    plain = allocator_config(AllocConf(), 80 * GiB, torch_version="2.10")
    assert plain.large_segment == plain.non_split_rounding == 20 << 20
    assert check_conf(AllocConf.parse("max_split_size_mb:20"), "2.9.0") == (
        "max_split_size_mb must be > 20 on torch 2.9, got 20")


def test_a_key_kept_verbatim_is_still_judged_by_its_versions():
    conf = AllocConf.parse("per_process_memory_fraction:0.9,throw_on_cudamalloc_oom:True")
    assert conf.extra == (("throw_on_cudamalloc_oom", "True"),)
    assert check_conf(conf, "2.12.0") is None
    assert check_conf(conf, "2.11.0") == "throw_on_cudamalloc_oom needs torch >= 2.12 (torch 2.11 does not know it)"
    assert "needs torch >= 2.14" in check_conf(AllocConf.parse("expandable_segments_reserve:1"), "2.13.0")


def test_the_simulator_leaves_out_keys_without_effect_and_refuses_those_it_does_not_follow():
    plain = allocator_config(AllocConf(), 80 * GiB, torch_version="2.13")
    reuse = allocator_config(AllocConf.parse("graph_capture_record_stream_reuse:True"), 80 * GiB,
                             torch_version="2.13")
    assert reuse.label != plain.label and {**vars(reuse), "label": ""} == {**vars(plain), "label": ""}
    with pytest.raises(ConfError, match="throw_on_cudamalloc_oom does to device memory is not known"):
        allocator_config(AllocConf.parse("throw_on_cudamalloc_oom:True"), 80 * GiB, torch_version="2.13")


def test_grid_rules_follow_the_keys_budget_flags():
    confs = [AllocConf.parse("garbage_collection_threshold:0.6,per_process_memory_fraction:0.5")]
    _, [skip] = apply_rules(confs, "2.13.0", has_budget=False)
    assert skip.reason.startswith("per_process_memory_fraction does not belong in a grid")
    assert "garbage_collection_threshold does nothing without a memory fraction below 1" in skip.reason


def test_readback_reads_what_each_key_reports_and_compares_what_is_in_force():
    settings = {"expandable_segments": True, "garbage_collection_threshold": 0.6000000238,
                "roundup_power2_divisions": {"1": 4, "2": 4}}
    effective = conf_from_settings(settings, 128 << 20)
    assert str(effective) == ("expandable_segments:True,max_split_size_mb:128,roundup_power2_divisions:4,"
                              "garbage_collection_threshold:0.6")
    assert readable_keys(False) == {"backend", "max_split_size_mb"}
    asked = AllocConf.parse("garbage_collection_threshold:0.6,max_split_size_mb:128,expandable_segments:True")
    assert mismatch(asked, effective, readable_keys(True)) is None
    assert mismatch(AllocConf.parse("backend:native"), AllocConf(), readable_keys(False)) is None
    assert mismatch(AllocConf(), effective, readable_keys(True)) == (
        "allocator settings did not take effect: expandable_segments: False asked, True in force; "
        "max_split_size_mb: None asked, 128 in force; garbage_collection_threshold: None asked, 0.6 in force")
    assert mismatch(AllocConf(), effective, readable_keys(False)) == (
        "allocator settings did not take effect: max_split_size_mb: None asked, 128 in force")


def test_the_split_limit_is_read_from_the_snapshot_where_it_carries_one():
    """memory_stats' max_split_size is the allocator's at start-up; a run-time parse changes the snapshot's only
    (as the H100 showed with torch 2.11): a process started under 128 MiB and switched back reads none, one
    started under none and switched to 128 MiB reads 128; an older snapshot without the figure reads memory_stats."""
    assert conf_from_settings({"max_split_size": -1}, 128 << 20) == AllocConf()
    assert str(conf_from_settings({"max_split_size": 128 << 20}, -1)) == "max_split_size_mb:128"
    assert str(conf_from_settings({"expandable_segments": False}, 128 << 20)) == "max_split_size_mb:128"


def _judged_here(text: str, version: str) -> str | None:
    """Why the registry refuses `text` for torch `version` (its parse, then the version's ranges), or None."""
    try:
        return check_conf(AllocConf.parse(text), version)
    except ConfError as exc:
        return str(exc)


@pytest.mark.slow
def test_torch_reads_every_value_the_registry_accepts_as_alloctune_prints_it():
    """Every numeric key at every edge (tests/key_values.py), judged by the registry and by this machine's torch's
    own parser: what the registry accepts torch accepts, written as alloctune writes it (the canonical form reads
    back as the same value); what torch refuses the registry refuses. The registry refuses more: whole numbers
    above LARGEST, which torch up to 2.8 refuses and later ones clamp or overflow on."""
    with SettingsJudge(sys.executable) as judge:
        if not judge.hello()["parser"]:
            pytest.skip("this torch has no run-time parser of allocator settings")
        version = judge.hello()["torch_version"]
        texts = boundary_settings()
        accepted = {text: str(AllocConf.parse(text)) for text in texts if _judged_here(text, version) is None}
        torch_says = judge.parse_errors(texts + sorted(set(accepted.values())))
    assert all(AllocConf.parse(canonical) == AllocConf.parse(text) for text, canonical in accepted.items())
    assert {text: torch_says[canonical] for text, canonical in accepted.items() if torch_says[canonical]} == {}
    assert [text for text in texts if torch_says[text] and text in accepted] == []
    refused_more = {text for text in texts if text not in accepted and not torch_says[text]}
    assert any(str(LARGEST + 1) in text for text in refused_more)
    assert all("must be at most 1073741824 (2^30)" in _judged_here(text, version) for text in refused_more
               if not text.startswith("per_process_memory_fraction"))   # a key this CPU build does not parse
