"""`alloctune fleet` answers only for what it was given: a job's trace given twice under any spelling (./a.xz and
a.xz, a link to it) is refused; jobs no setting fits on their card are named as left out, and where that is every
job no setting is named best; the settings the grid's rules skip (a garbage collection threshold without a budget)
are said with why, and --budget ranks them; a setting fits a job as replay says it fits (an alloc retry fits, with
its retries said), and one that does not fit a job has no percentage for its worst case. Each on traces written
here, through the command line; a job whose snapshot was taken at an OOM is replayed under what it says the
process could have, and that is said by job, as replay says it; so is every other line replay warns of a job's trace
(an assumed card or torch, the trace's own), one that every job gives said once."""
from __future__ import annotations

import json
import os
import pickle

import pytest
from clirun import ROOT, in_process
from scaled import scaled_trace
from snapshots import read_snapshot

from alloctune.sim.trace import Trace, save_trace
from alloctune.units import GiB, MiB

GRID = ["--conf", "default", "--conf", "expandable_segments:True", "--jobs", "1"]


@pytest.fixture
def jobs(tmp_path) -> list[str]:
    """Two jobs' traces, by their names in tmp_path (the tests run there); b.xz's peak is about 4 times a.xz's."""
    for name, value in (("a", 8), ("b", 64)):
        save_trace(scaled_trace(value), tmp_path / f"{name}.xz")
    return ["a.xz", "b.xz"]


def fleet(tmp_path, *args):
    return in_process("fleet", *args, cwd=tmp_path)


def test_one_trace_given_twice_however_spelt_is_refused(tmp_path, jobs):
    os.symlink("a.xz", tmp_path / "link.xz")
    (tmp_path / "sub").mkdir()
    for twice in (["./a.xz", "a.xz"], ["a.xz", "link.xz"], ["a.xz", "sub/../a.xz"], ["b.xz", str(tmp_path / "a.xz"),
                                                                                     "a.xz"]):
        run = fleet(tmp_path, *twice, *GRID)
        assert run.returncode == 2 and run.stdout == "", run
        [line] = run.stderr.splitlines()
        assert "each job's trace once: " in line and "are one trace" in line, line
    run = fleet(tmp_path, *jobs, *GRID, "--json")   # two files: two jobs
    assert run.returncode == 0 and json.loads(run.stdout)["best"] is not None, run.stderr


def test_jobs_no_setting_runs_are_left_out_by_name_and_none_left_names_no_best(tmp_path, jobs):
    # On 4 GiB a.xz runs (2 GiB of weights, a little more and its context) and b.xz runs out of memory under every setting.
    run = fleet(tmp_path, *jobs, *GRID, "--device-memory", "4GiB")
    assert run.returncode == 0, run.stderr
    assert "left out: b, which no setting fits on its card (an OOM under each)" in " ".join(run.stdout.split())
    assert "Least loss across the 1 job: " in run.stdout and "across the 2 jobs" not in run.stdout
    answer = json.loads(fleet(tmp_path, *jobs, *GRID, "--device-memory", "4GiB", "--json").stdout)
    assert answer["left_out"] == ["b"] and answer["best"] is not None
    for args in ([], ["--json"]):   # on 1 GiB no setting runs either job
        run = fleet(tmp_path, *jobs, *GRID, "--device-memory", "1GiB", *args)
        assert run.returncode == 0, run.stderr
        if args:
            answer = json.loads(run.stdout)
            assert answer["best"] is None and answer["left_out"] == ["a", "b"]
        else:
            assert "No setting fits any job." in run.stdout and "Least loss" not in run.stdout, run.stdout
            assert "across the 0 jobs" not in run.stdout


def test_settings_a_budget_acts_on_are_skipped_with_why_and_ranked_under_one(tmp_path, jobs):
    gc = "garbage_collection_threshold:0.8"
    run = fleet(tmp_path, *jobs, *GRID, "--conf", gc)
    assert run.returncode == 0, run.stderr
    assert f"skipped {gc}: garbage_collection_threshold does nothing without a memory fraction below 1: give " \
           "--budget to try it" in " ".join(run.stdout.split())
    answer = json.loads(fleet(tmp_path, *jobs, *GRID, "--conf", gc, "--json").stdout)
    assert [s["conf"] for s in answer["skipped"]] == [gc] and gc not in [s["conf"] for s in answer["settings"]]
    for budget in ("0.5", f"{70 * GiB}", "70GiB"):
        answer = json.loads(fleet(tmp_path, *jobs, *GRID, "--conf", gc, "--budget", budget, "--json").stdout)
        assert answer["skipped"] == [] and gc in [s["conf"] for s in answer["settings"]], budget
    # a budget too small for either job: every setting fails both, as on a card that small
    answer = json.loads(fleet(tmp_path, *jobs, *GRID, "--budget", "1GiB", "--json").stdout)
    assert answer["best"] is None and answer["left_out"] == ["a", "b"]
    run = fleet(tmp_path, *jobs, "--budget", "lots")
    assert run.returncode == 2 and run.stderr.startswith("alloctune: error: --budget") \
        and len(run.stderr.splitlines()) == 1, run.stderr


def retried_trace() -> Trace:
    """2 GiB of weights, then six blocks of 200 MiB freed and six of 260 MiB, twice: the 260 MiB blocks cannot reuse
    the cached 200 MiB ones, so on a card of 4416 MiB the default releases its cache and retries once (and fits),
    where expandable segments run out of memory; on 5 GiB both fit, the default with its retry."""
    kinds, addrs, sizes = [0], [0], [2 * GiB]
    for size in (200 * MiB, 260 * MiB) * 2:
        block = list(range(len(kinds), len(kinds) + 6))
        for kind in (0, 1):
            kinds += [kind] * 6
            addrs += block
            sizes += [size] * 6
    return Trace(kinds, addrs, sizes, [0] * len(kinds),
                 meta={"torch_version": "2.11.0+cu130", "device_total_bytes": 150109880320,
                       "overhead_bytes": 800 * MiB})


def test_a_setting_that_needs_an_alloc_retry_fits_as_replay_says_and_an_oom_is_no_percentage(tmp_path, jobs):
    save_trace(retried_trace(), tmp_path / "r.xz")
    both = ["a.xz", "r.xz"]
    for memory in ("5GiB", "4416MiB"):
        replayed = json.loads(in_process("replay", "r.xz", *GRID, "--device-memory", memory, "--json",
                                         cwd=tmp_path).stdout)
        said = {r["conf"]: (r["fits"], r["num_alloc_retries"] if r["fits"] else 0) for r in replayed["results"]}
        answer = json.loads(fleet(tmp_path, *both, *GRID, "--device-memory", memory, "--json").stdout)
        ranked = {s["conf"]: {j["job"]: (j["fits"], j["num_alloc_retries"]) for j in s["jobs"]}["r"]
                  for s in answer["settings"]}
        assert ranked == said and said["default"] == (True, 1), (memory, said)   # the one rule, one word
    default, expandable = (next(s for s in answer["settings"] if s["conf"] == c)
                           for c in ("default", "expandable_segments:True"))
    assert default["failed"] == [] and default["retried"] == ["r"] and answer["best"] == "default"
    assert expandable["failed"] == ["r"] and answer["left_out"] == []
    text = " ".join(fleet(tmp_path, *both, *GRID, "--device-memory", "4416MiB").stdout.split())
    assert "fails" not in text and " (1 retry) " in text
    assert " expandable_segments:True OOM - 1 0 " in text   # its worst case is the job it does not fit
    assert "r: nothing: it is its best; it fits, with 1 alloc retry" in text


def test_a_job_replayed_under_what_its_oom_snapshot_allowed_is_named_in_a_warning_as_replay_warns(tmp_path, jobs):
    """Neither --budget nor --device-memory: the OOM snapshot's job runs under the memory the process was allowed
    (changed here to 3.5 GiB), and a warning line (text, and JSON "warnings") names that job in replay's words; the
    other job, and any run given either option, has no such line."""
    snapshot = read_snapshot(ROOT / "tests" / "fixtures" / "oom" / "h200" / "frag" / "oom-rank0.pickle")
    snapshot["alloctune"]["oom"]["allowed_bytes"] = 3584 * MiB
    (tmp_path / "oom-rank0.pickle").write_bytes(pickle.dumps(snapshot))
    both = ["oom-rank0.pickle", jobs[0]]
    said = ("replayed under a budget of 3.50 GiB, what the snapshot says the process could have; --budget sets "
            "another")
    replayed = in_process("replay", both[0], *GRID, cwd=tmp_path)
    assert said in " ".join(replayed.stdout.split()), replayed.stdout
    run = fleet(tmp_path, *both, *GRID)
    assert run.returncode == 0, run.stderr
    warned = [line for line in " ".join(run.stdout.split()).split("warning: ")[1:] if "snapshot says" in line]
    assert len(warned) == 1 and warned[0].startswith(f"oom-rank0: {said}"), run.stdout
    answer = json.loads(fleet(tmp_path, *both, *GRID, "--json").stdout)
    own = json.loads(in_process("replay", both[0], *GRID, "--json", cwd=tmp_path).stdout)["warnings"]
    assert said in own and answer["warnings"] == [f"oom-rank0: {w}" for w in own]   # the other job: none
    for option in (("--budget", "8GiB"), ("--device-memory", "140GiB")):
        run = fleet(tmp_path, *both, *GRID, *option)
        assert run.returncode == 0 and "snapshot says" not in run.stdout, run.stderr


def test_each_job_is_warned_of_what_replay_warns_of_its_trace_and_a_line_every_job_gives_is_said_once(tmp_path, jobs):
    """A trace whose meta says neither its card's memory nor its torch, with a warning of its own (frees of blocks
    from before the recording): fleet says, of that job, each line replay prints of its trace, in text and in JSON;
    a job whose trace says all that (a.xz) has none. A line every job gives (an assumed card) is said once, of
    every job, and --device-memory takes it away as it does in replay."""
    own = "3 frees of blocks allocated before the recording started were dropped"
    for name, drop in (("bare", ("device_total_bytes", "torch_version")), ("nocard", ("device_total_bytes",))):
        trace = scaled_trace(8)
        trace.meta = {**{k: v for k, v in trace.meta.items() if k not in drop}, "warnings": [own] * (name == "bare")}
        save_trace(trace, tmp_path / f"{name}.xz")

    def replayed(job: str, *args: str) -> list[str]:
        run = in_process("replay", f"{job}.xz", *GRID, *args, "--json", cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)["warnings"]

    def said(*args: str) -> list[str]:
        """fleet's warnings in JSON, checked to be the text's `warning:` lines, in order."""
        answer, text = (fleet(tmp_path, *args, *GRID, *json_flag) for json_flag in (["--json"], []))
        assert answer.returncode == text.returncode == 0, (answer.stderr, text.stderr)
        warnings = json.loads(answer.stdout)["warnings"]
        printed = " ".join(text.stdout.split()).split("warning: ")[1:]   # the text wraps them at 100 columns
        flat = [" ".join(w.split()) for w in warnings]
        assert len(printed) == len(flat) and all(map(str.startswith, printed, flat)), (printed, flat)
        return warnings

    bare, card = replayed("bare"), "the trace does not say how much memory its GPU had"
    assert replayed("a") == [] and own in bare and any(card in w for w in bare) and len(bare) == 3, bare
    assert said("a.xz", "bare.xz") == [f"bare: {w}" for w in bare]
    assert said(*jobs) == []
    [common] = [w for w in bare if card in w]
    assert replayed("nocard") == [common]
    assert said("bare.xz", "nocard.xz") == [f"every job: {common}", *(f"bare: {w}" for w in bare if w != common)]
    memory = ("--device-memory", "140GiB")
    assert said("bare.xz", "nocard.xz", *memory) == [f"bare: {w}" for w in replayed("bare", *memory)]
