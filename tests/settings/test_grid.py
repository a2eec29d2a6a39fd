import pytest

from alloctune.errors import ConfError
from alloctune.settings.conf import AllocConf
from alloctune.settings.grid import DEFAULT_GRID, Skip, apply_rules, expand, load_grid_file


def labels(confs):
    return [str(c) for c in confs]


def test_default_grid_shape():
    assert DEFAULT_GRID[0] == ""
    assert 8 <= len(DEFAULT_GRID) <= 10
    confs = expand(DEFAULT_GRID)
    assert labels(confs) == DEFAULT_GRID          # canonical already, no duplicates
    keys = {k for c in confs for k in c.keys}
    assert {"max_split_size_mb", "garbage_collection_threshold", "expandable_segments",
            "roundup_power2_divisions", "backend"} <= keys
    assert any(isinstance(c.roundup_power2_divisions, tuple) for c in confs)
    assert any(c.is_async for c in confs)


def test_default_grid_is_valid_on_2_11_and_keeps_all_under_a_budget():
    kept, skipped = apply_rules(expand(DEFAULT_GRID), "2.11.0+cu130", has_budget=True)
    assert skipped == [] and labels(kept) == DEFAULT_GRID


def test_default_grid_without_budget_drops_only_gc():
    kept, skipped = apply_rules(expand(DEFAULT_GRID), "2.11.0", has_budget=False)
    assert [s.conf for s in skipped] == ["garbage_collection_threshold:0.6", "garbage_collection_threshold:0.8"]
    assert all("--budget" in s.reason for s in skipped)
    assert kept[0].is_default


def test_expand_strings_default_first_and_deduplicated():
    confs = expand(["max_split_size_mb:128", "default", "expandable_segments:True", "max_split_size_mb:128",
                    "max_split_size_mb: 128"])
    assert labels(confs) == ["", "max_split_size_mb:128", "expandable_segments:True"]


def test_expand_always_adds_default():
    assert labels(expand(["expandable_segments:True"])) == ["", "expandable_segments:True"]
    assert labels(expand([])) == [""]


def test_expand_cartesian_product_in_order():
    confs = expand([{"max_split_size_mb": [128, 512], "garbage_collection_threshold": [0.6, 0.8]}])
    assert labels(confs) == [
        "",
        "max_split_size_mb:128,garbage_collection_threshold:0.6",
        "max_split_size_mb:128,garbage_collection_threshold:0.8",
        "max_split_size_mb:512,garbage_collection_threshold:0.6",
        "max_split_size_mb:512,garbage_collection_threshold:0.8",
    ]


def test_expand_scalar_none_and_bool_values():
    confs = expand([{"expandable_segments": True, "roundup_power2_divisions": [None, 4, "[256:1,>:4]"]}])
    assert labels(confs) == ["", "expandable_segments:True",
                             "expandable_segments:True,roundup_power2_divisions:4",
                             "expandable_segments:True,roundup_power2_divisions:[256:1,>:4]"]


def test_expand_accepts_allocconf_and_single_string():
    assert labels(expand(AllocConf(max_split_size_mb=256))) == ["", "max_split_size_mb:256"]
    assert labels(expand("backend:cudaMallocAsync")) == ["", "backend:cudaMallocAsync"]


@pytest.mark.parametrize("bad, words", [
    ([42], "setting string or a mapping"),
    ([{}], "empty mapping"),
    ([{"max_split_size_mb": []}], "empty list"),
    ([{"roundup_power2_divisions": [[256, 1]]}], "as a string"),
    (["expandable_segments:true"], "'True' or 'False'"),
    (["max_split_size_mb"], "key:value"),
    ([{"max_split_size_mb": ["big"]}], "whole number"),
    (42, "list of settings"),
])
def test_expand_rejects_bad_entries(bad, words):
    with pytest.raises(ConfError, match=words):
        expand(bad)


def _rules(texts, version="2.11.0", budget=False, accepted=None):
    kept, skipped = apply_rules(expand(texts), version, has_budget=budget, accepted=accepted)
    return labels(kept), {s.conf: s.reason for s in skipped}


def test_rule_gc_needs_budget():
    kept, skipped = _rules(["garbage_collection_threshold:0.6"])
    assert "memory fraction below 1" in skipped["garbage_collection_threshold:0.6"]
    kept, skipped = _rules(["garbage_collection_threshold:0.6"], budget=True)
    assert kept == ["", "garbage_collection_threshold:0.6"] and not skipped


@pytest.mark.parametrize("version, conf, problem", [
    ("2.2.0", "expandable_segments:True,max_split_size_mb:128", "expandable-max-split-assert"),
    ("2.11.0", "expandable_segments:True,max_split_size_mb:128", "expandable-ignores-max-split"),
    ("2.13.0", "expandable_segments:True,max_split_size_mb:128", "expandable-max-split-growth"),
    ("2.4.0", "expandable_segments:True,garbage_collection_threshold:0.6", "expandable-near-oom-assert"),
    ("2.11.0", "expandable_segments:True,garbage_collection_threshold:0.6", "expandable-ignores-gc"),
    ("2.11.0", "backend:cudaMallocAsync,roundup_power2_divisions:4", "async-ignores-native-keys"),
    ("2.13.0", "backend:cudaMallocAsync,expandable_segments:True", "async-ignores-native-keys"),
])
def test_a_known_problem_on_the_target_torch_skips_with_its_reason_and_source(version, conf, problem):
    kept, skipped = apply_rules(expand([conf]), version, has_budget=True)
    assert labels(kept) == [""] and len(skipped) == 1
    skip = skipped[0]
    assert skip.problem is not None and skip.problem.id == problem and not skip.rejected
    assert skip.reason == skip.problem.reason and skip.problem.source in skip.reason


def test_settings_without_a_known_problem_are_kept():
    kept, skipped = _rules(["expandable_segments:False,max_split_size_mb:128", "backend:native,"
                            "roundup_power2_divisions:4", "backend:cudaMallocAsync", "expandable_segments:True"],
                           version="2.13.0", budget=True)
    assert len(kept) == 5 and not skipped


def test_a_torch_refusal_keeps_the_known_problem_beside_it():
    _, skips = apply_rules(expand(["expandable_segments:True,max_split_size_mb:10"]), "2.11.0", has_budget=False)
    assert skips[0].rejected and "must be >= large_segment_size_mb" in skips[0].reason
    assert skips[0].problem.id == "expandable-ignores-max-split"


def test_an_unknown_torch_takes_every_range():
    _, skipped = apply_rules(expand(["expandable_segments:True,max_split_size_mb:128"]), None, has_budget=True)
    assert skipped[0].problem.id == "expandable-max-split-assert"   # the worst problem of any version


def test_rule_no_memory_fraction_in_grid():
    kept, skipped = _rules(["per_process_memory_fraction:0.5"], budget=True)
    assert "--budget" in skipped["per_process_memory_fraction:0.5"]


def test_rule_version_table():
    kept, skipped = _rules(["expandable_segments:True", "large_segment_size_mb:64"], version="2.10.0")
    assert kept == ["", "expandable_segments:True"]
    assert "needs torch >= 2.11" in skipped["large_segment_size_mb:64"]
    kept, skipped = _rules(["expandable_segments:True"], version="2.0.1")
    assert kept == [""] and "needs torch >= 2.1" in skipped["expandable_segments:True"]


def test_rule_unknown_version_skips_only_version_checks():
    kept, skipped = _rules(["large_segment_size_mb:64", "garbage_collection_threshold:0.6"], version=None)
    assert kept == ["", "large_segment_size_mb:64"]
    assert list(skipped) == ["garbage_collection_threshold:0.6"]


def test_probe_verdicts_beat_the_table():
    accepted = {"max_split_size_mb:128": "torch 2.11.0 rejects it: something torch says",
                "large_segment_size_mb:64": None}
    kept, skipped = _rules(["max_split_size_mb:128", "large_segment_size_mb:64"], version="2.10.0",
                           accepted=accepted)
    assert kept == ["", "large_segment_size_mb:64"]
    assert skipped == {"max_split_size_mb:128": "torch 2.11.0 rejects it: something torch says"}


def test_several_reasons_are_all_given():
    kept, skipped = _rules(["expandable_segments:True,garbage_collection_threshold:0.6"], version="2.0.1")
    reason = skipped["expandable_segments:True,garbage_collection_threshold:0.6"]
    assert "needs torch >= 2.1" in reason and "--budget" in reason and "pull/134338" in reason


def test_default_is_never_dropped():
    kept, skipped = apply_rules([AllocConf()], "2.0.0", has_budget=False, accepted={"": "rejected"})
    assert labels(kept) == [""] and skipped == []


def test_skip_to_json():
    assert Skip(AllocConf.parse("a:1"), "why").to_json() == {"conf": "a:1", "reason": "why"}


def test_bad_torch_version():
    with pytest.raises(ConfError, match="torch version"):
        apply_rules(expand([]), "nightly", has_budget=False)


def test_load_yaml_list(tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text("- default\n- expandable_segments:True\n- max_split_size_mb: [128, 512]\n"
                    "- {roundup_power2_divisions: ['[256:1,>:4]']}\n")
    entries = load_grid_file(path)
    assert labels(expand(entries)) == ["", "expandable_segments:True", "max_split_size_mb:128",
                                       "max_split_size_mb:512", "roundup_power2_divisions:[256:1,>:4]"]


def test_load_yaml_mapping_with_grid(tmp_path):
    path = tmp_path / "g.yml"
    path.write_text("grid:\n  - expandable_segments: True\n")
    assert labels(expand(load_grid_file(path))) == ["", "expandable_segments:True"]


def test_load_plain_text(tmp_path):
    path = tmp_path / "grid.txt"
    path.write_text("# my grid\n\ndefault\nexpandable_segments:True  # the usual winner\n"
                    "roundup_power2_divisions:[256:1,512:2,>:4],max_split_size_mb:256\n")
    assert load_grid_file(path) == ["default", "expandable_segments:True",
                                    "roundup_power2_divisions:[256:1,512:2,>:4],max_split_size_mb:256"]


@pytest.mark.parametrize("name, text, words", [
    ("g.yaml", "- a: [1\n", "not valid YAML"),
    ("g.yaml", "max_split_size_mb: 128\n", "YAML list"),
    ("g.yaml", "[]\n", "YAML list"),
    ("g.txt", "# nothing\n\n", "no settings"),
    ("g.txt", "expandable_segments:yes\n", "'True' or 'False'"),
    ("g.yaml", "- foo\n", "key:value"),
])
def test_load_bad_files_name_the_file(tmp_path, name, text, words):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfError, match=words) as info:
        load_grid_file(path)
    assert str(path) in str(info.value)


def test_load_missing_file(tmp_path):
    with pytest.raises(ConfError, match="cannot read grid file .*nope.yaml"):
        load_grid_file(tmp_path / "nope.yaml")
