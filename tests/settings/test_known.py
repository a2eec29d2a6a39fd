"""The table of known problems (`settings/known.py`): every entry sourced and ranged, the queries on ordinary and
degenerate inputs, the variables each torch reads, and that it covers today's grid rules and version notes."""
from __future__ import annotations

import re

import pytest

from alloctune.settings.conf import AllocConf
from alloctune.errors import ConfError
from alloctune.settings.known import (ALWAYS, PROBLEMS, VARIABLES, Feature, Setting, Severity, Versions,
                                      env_vars_read, export_variable, forbidden_combination, problems,
                                      unread_variables, variable_read)

RELEASES = [f"2.{minor}.0" for minor in range(1, 15)]
URL = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+$|"
                 r"^https://github\.com/[\w.-]+/[\w.-]+/blob/[0-9a-f]{40}/\S+$")


def _ids(found):
    return [p.id for p in found]


def test_every_entry_has_a_public_source_a_range_and_plain_words():
    assert len({p.id for p in PROBLEMS}) == len(PROBLEMS)
    for p in PROBLEMS:
        assert URL.match(p.source), p.id
        assert all(URL.match(url) for url in p.also), p.id
        assert p.evidence and p.summary and "\n" not in p.summary, p.id
        assert isinstance(p.severity, Severity) and all(isinstance(f, Feature) for f in p.when)
        if p.versions.first and p.versions.fixed:
            assert p.versions.first < p.versions.fixed, p.id
        assert p.source in p.reason and str(p.versions) in p.reason
    for v in VARIABLES:
        assert URL.match(v.source) and v.evidence


@pytest.mark.parametrize("conf, version, expected", [
    ("expandable_segments:True,max_split_size_mb:128", "2.2.2", "expandable-max-split-assert"),
    ("expandable_segments:True,max_split_size_mb:128", "2.3.0", "expandable-near-oom-assert"),
    ("expandable_segments:True,max_split_size_mb:128", "2.8.0", "expandable-ignores-max-split"),
    ("expandable_segments:True,max_split_size_mb:128", "2.13.0+cu130", "expandable-max-split-growth"),
    ("max_split_size_mb:512,expandable_segments:True", "2.12.0", "expandable-max-split-growth"),
    ("expandable_segments:True,garbage_collection_threshold:0.6", "2.4.1", "expandable-near-oom-assert"),
    ("expandable_segments:True,garbage_collection_threshold:0.6", "2.5.0", "expandable-ignores-gc"),
    ("backend:cudaMallocAsync,roundup_power2_divisions:4", "2.1.0", "async-ignores-native-keys"),
    ("backend:cudaMallocAsync,expandable_segments:True", "2.13.0", "async-ignores-native-keys"),
    ("expandable_segments:True", "2.13.0", None),
    ("expandable_segments:False,max_split_size_mb:128", "2.13.0", None),   # off: no expandable segments
    ("max_split_size_mb:128", "2.13.0", None),
    ("backend:cudaMallocAsync", "2.13.0", None),
    ("backend:native,max_split_size_mb:128", "2.13.0", None),
    ("", "2.13.0", None),
])
def test_forbidden_combination_gives_the_worst_problem_on_the_target_torch(conf, version, expected):
    found = forbidden_combination(AllocConf.parse(conf), version)
    assert (found.id if found else None) == expected


def test_features_add_problems_only_for_jobs_that_used_all_of_them():
    expandable = AllocConf.parse("expandable_segments:True")
    assert problems(expandable, "2.13.0") == []
    assert _ids(problems(expandable, "2.13.0", [Feature.CUDA_IPC])) == ["expandable-cuda-ipc-pidfd"]
    assert _ids(problems(expandable, "2.13.0", [Feature.CUDA_GRAPHS])) == []   # graphs without NCCL
    assert _ids(problems(expandable, "2.13.0", [Feature.CUDA_GRAPHS, Feature.NCCL])) == [
        "expandable-cudagraph-nccl-hang"]
    both = [Feature.CUDA_GRAPHS, Feature.NCCL, Feature.NCCL_GRAPH_REGISTRATION]
    assert _ids(problems(expandable, "2.13.0", both)) == ["expandable-nccl-graph-register",
                                                          "expandable-cudagraph-nccl-hang"]
    # worst first: vLLM's crash before its sleep mode's silent switch-off
    assert [p.severity for p in problems(expandable, "2.13.0", [Feature.VLLM])] == [Severity.BROKEN,
                                                                                   Severity.INEFFECTIVE]


def test_a_run_time_change_concerns_only_the_keys_it_resets():
    change = [Feature.RUNTIME_ALLOCATOR_CHANGE]
    assert _ids(problems(AllocConf.parse("roundup_power2_divisions:4"), "2.13.0", change)) == [
        "runtime-change-resets-keys"]
    assert problems(AllocConf.parse("expandable_segments:True"), "2.13.0", change) == []


def test_the_unread_variable_of_2_9_applies_to_2_9_only():
    conf, unread = AllocConf.parse("expandable_segments:True"), [Feature.UNREAD_VARIABLE]
    assert _ids(problems(conf, "2.9.1", unread)) == ["alloc-conf-unread-2.9"]
    assert problems(conf, "2.10.0", unread) == [] and problems(conf, "2.8.0", unread) == []


def test_degenerate_inputs():
    default = AllocConf()
    for version in RELEASES + [None]:
        assert problems(default, version, set(Feature)) == []   # the default is never a known problem
        assert forbidden_combination(default, version) is None
    # unknown version: every range counts, so both the old assert and the new growth show
    unknown = _ids(problems(AllocConf.parse("expandable_segments:True,max_split_size_mb:128"), None))
    assert {"expandable-max-split-assert", "expandable-max-split-growth"} <= set(unknown)
    assert problems(AllocConf.parse("expandable_segments:True"), "2.13.0", []) == []
    with pytest.raises(ConfError, match="torch version"):
        problems(AllocConf.parse("expandable_segments:True"), "not-a-version")
    assert export_variable("2.13.0").name == "PYTORCH_CUDA_ALLOC_CONF"
    # a torch not named: the name every version reads first, and no warning that may not apply
    assert (export_variable(None).name, export_variable(None).warning) == ("PYTORCH_CUDA_ALLOC_CONF", None)


def test_setting_and_versions_read_as_words():
    assert str(Setting((("expandable_segments", True), ("max_split_size_mb", None)))) == \
        "expandable_segments:True with max_split_size_mb"
    assert str(Setting(any_of=("a", "b"))) == "a or b" and str(Setting()) == "any setting"
    assert Setting().matches(AllocConf.parse("max_split_size_mb:128")) and not Setting().matches(AllocConf())
    assert str(Versions((2, 9, 0), (2, 10, 0))) == "2.9 to before 2.10"
    assert str(Versions(first=(2, 12, 0))) == "from 2.12" and str(Versions(fixed=(2, 3, 0))) == "before 2.3"
    assert str(Versions()) == "every version" and (2, 1, 0) in Versions() and ALWAYS == frozenset()


@pytest.mark.parametrize("version, names", [
    ("2.1.2", ("PYTORCH_CUDA_ALLOC_CONF",)),
    ("2.8.0+cu128", ("PYTORCH_CUDA_ALLOC_CONF",)),
    ("2.9.1", ("PYTORCH_CUDA_ALLOC_CONF",)),        # PYTORCH_ALLOC_CONF exists but CUDA ignores it
    ("2.10.0", ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")),
    ("2.11.0+cu130", ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")),
])
def test_the_variables_each_torch_reads_in_lookup_order(version, names):
    assert env_vars_read(version) == names


def test_which_variable_was_read_and_which_were_not():
    both = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "PYTORCH_ALLOC_CONF": "max_split_size_mb:64"}
    assert variable_read(both, "2.13.0") == "PYTORCH_CUDA_ALLOC_CONF"
    assert unread_variables(both, "2.13.0") == ("PYTORCH_ALLOC_CONF",)     # shadowed
    new_only = {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}
    assert variable_read(new_only, "2.13.0") == "PYTORCH_ALLOC_CONF" and unread_variables(new_only, "2.13.0") == ()
    assert variable_read(new_only, "2.9.1") is None                          # 2.9 ignores it
    assert unread_variables(new_only, "2.9.1") == ("PYTORCH_ALLOC_CONF",)
    assert variable_read({}, "2.13.0") is None and unread_variables({}, "2.13.0") == ()


@pytest.mark.parametrize("version, warns", [("2.8.0", False), ("2.9.1", True), ("2.11.0", True),
                                            ("2.13.0", False), ("2.14.1", False)])
def test_export_writes_the_first_variable_read_and_says_when_it_may_warn(version, warns):
    chosen = export_variable(version)
    assert chosen.name == env_vars_read(version)[0] == "PYTORCH_CUDA_ALLOC_CONF"
    assert (chosen.warning is not None) == warns
    if warns:
        assert "deprecation" in chosen.warning and "issues/183387" in chosen.warning
