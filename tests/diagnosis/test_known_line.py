"""What `diagnose` adds to its next steps from the table of known problems (diagnosis/words.known_problems_line),
in the table's own words (settings/known.py), which the choice's reasons use too (report/problems.py)."""
from __future__ import annotations

from pathlib import Path

from alloctune.diagnosis import diagnose
from alloctune.diagnosis.words import known_problems_line
from alloctune.settings.conf import AllocConf
from alloctune.settings.known import FEATURE_WORDS, Feature, Versions, features_phrase, problems
from alloctune.settings.versions import parse_version

ES, MS, RP = "expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4"
FRAG = Path(__file__).resolve().parents[1] / "fixtures" / "oom" / "h200" / "frag"


def test_what_the_table_holds_for_a_setting_said_for_a_job_not_seen():
    assert set(FEATURE_WORDS) == set(Feature)   # every feature has its words
    assert features_phrase([Feature.CUDA_GRAPHS, Feature.NCCL, Feature.VLLM]) == (
        "captured CUDA graphs, ran an NCCL process group and imported vllm")
    everything = set(Feature)
    line = known_problems_line(RP, "2.13.0", None, problems(AllocConf.parse(RP), "2.13.0", everything))
    assert line == ("before using roundup_power2_divisions:4, check the job against its known problems on torch "
                    "2.13.0: it can take no effect (in part or whole) if the job changed allocator settings "
                    "at run time (https://github.com/pytorch/pytorch/blob/065861fba7598880aa3216822742a1172d0a197c/"
                    "c10/core/AllocatorConfig.cpp)")
    pair = f"{ES},{MS}"
    found = problems(AllocConf.parse(pair), None, everything)
    line = known_problems_line(pair, None, Versions(parse_version("2.2")), found[:2], len(found) - 2,
                               {Feature.CUDA_IPC})
    assert line.startswith(f"before using {pair}, check the job against its known problems on torch from 2.2 (as "
                           "the message's layout tells): it can break the job whatever the job does "
                           "(https://github.com/pytorch/pytorch/issues/119452); or whatever the job does")
    assert line.endswith(f"; and {len(found) - 2} more (`alloctune diagnose --all-problems` lists them)")
    ipc = [p for p in problems(AllocConf.parse(ES), None, everything) if p.when == {Feature.CUDA_IPC}]
    assert known_problems_line(ES, None, None, ipc, 0, {Feature.CUDA_IPC}) == (
        f"before using {ES}, check the job against its known problems on any torch (the source does not say which): "
        f"it can break the job as the job sent or received CUDA tensors between processes ({ipc[0].source})")
    assert known_problems_line("per_process_memory_fraction:0.5", "2.13.0", None, []) == (
        "alloctune's table of known problems has none for per_process_memory_fraction:0.5 on torch 2.13.0")


def test_the_api_gives_the_line_right_after_the_step_that_names_the_setting():
    for source in (FRAG / "oom-rank0.pickle", FRAG / "oom-rank0.txt"):
        d = diagnose(source)
        assert d.checked_conf == ES and ES in d.next_steps[0]
        assert d.next_steps[1].startswith(f"before using {ES}, check the job against its known problems on ")
        assert d.to_json()["next_steps"] == d.next_steps
