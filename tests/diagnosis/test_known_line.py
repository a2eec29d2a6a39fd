"""What `diagnose` adds to its next steps from the table of known problems (diagnosis/words.known_problems_line),
in the table's own words (settings/known.py), which the choice's reasons use too (report/problems.py)."""
from __future__ import annotations

from pathlib import Path

from alloctune.diagnosis import diagnose
from alloctune.diagnosis.words import known_problems_line
from alloctune.settings.conf import AllocConf
from alloctune.settings.known import FEATURE_WORDS, Feature, features_phrase, problems

ES, MS, RP = "expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4"
FRAG = Path(__file__).resolve().parents[1] / "fixtures" / "oom" / "h200" / "frag"


def test_what_the_table_holds_for_a_setting_said_for_a_job_not_seen():
    assert set(FEATURE_WORDS) == set(Feature)   # every feature has its words
    assert features_phrase([Feature.CUDA_GRAPHS, Feature.NCCL, Feature.VLLM]) == (
        "captured CUDA graphs, ran an NCCL process group and imported vllm")
    everything = set(Feature)
    line = known_problems_line(RP, "2.13.0", problems(AllocConf.parse(RP), "2.13.0", everything))
    assert line == ("alloctune's table of known problems, for roundup_power2_divisions:4 on torch 2.13.0, to check "
                    "against the job: it can take no effect (in part or whole) if the job changed allocator settings "
                    "at run time (https://github.com/pytorch/pytorch/blob/065861fba7598880aa3216822742a1172d0a197c/"
                    "c10/core/AllocatorConfig.cpp)")
    pair = f"{ES},{MS}"
    line = known_problems_line(pair, None, problems(AllocConf.parse(pair), None, everything))
    assert line.startswith(f"alloctune's table of known problems, for {pair} on any torch (which one is not known), "
                           "to check against the job: it can break the job whatever the job does "
                           "(https://github.com/pytorch/pytorch/issues/119452); or whatever the job does")
    assert known_problems_line("per_process_memory_fraction:0.5", "2.13.0", []) == (
        "alloctune's table of known problems has none for per_process_memory_fraction:0.5 on torch 2.13.0")


def test_the_api_gives_the_line_right_after_the_step_that_names_the_setting():
    for source, torch in ((FRAG / "oom-rank0.pickle", "torch 2.11.0+cu130"),
                          (FRAG / "oom-rank0.txt", "any torch (which one is not known)")):
        d = diagnose(source)
        assert d.checked_conf == ES and ES in d.next_steps[0]
        assert d.next_steps[1] == known_problems_line(ES, d.torch_version, d.known_problems)
        assert d.next_steps[1].startswith(f"alloctune's table of known problems, for {ES} on {torch}, to check "
                                          "against the job: it can break the job if the job sent or received CUDA "
                                          "tensors between processes (https://github.com/pytorch/pytorch/issues/165685)")
        assert d.to_json()["next_steps"] == d.next_steps
