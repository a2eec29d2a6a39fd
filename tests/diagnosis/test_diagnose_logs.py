"""`alloctune diagnose` on what a new user's logs hold (issue 29): figures no allocator state has, several OOMs of
several ranks in one log, the setting recommended as data, and the known problems that matter for the job."""
import json

import pytest
from clirun import ROOT, cli

from alloctune.diagnosis import diagnose
from alloctune.diagnosis.facts import Cause
from alloctune.diagnosis.message import excerpt
from alloctune.errors import DiagnoseError

PUBLIC = ROOT / "tests" / "fixtures" / "oom" / "public"


def run_cli(*args):
    """`alloctune diagnose ARGS` 120 columns wide: the lines the text checks look for are not wrapped."""
    return cli("diagnose", *args, env={"COLUMNS": "120"}, timeout=120)


def message(requested="20.00 MiB", gpu=0, total="79.15 GiB", free="1.91 GiB", allocated="51.75 GiB",
            unallocated="6.05 GiB", extra=""):
    """A torch 2.2+ message with these figures."""
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {requested}. GPU {gpu} has a total "
            f"capacity of {total} of which {free} is free. {extra}Of the allocated memory {allocated} is allocated by "
            f"PyTorch, and {unallocated} is reserved by PyTorch but unallocated. If reserved but unallocated memory "
            "is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n")


@pytest.mark.parametrize("figures, said", [
    (dict(total="1.00 GiB", free="50.00 GiB", allocated="100.00 MiB", unallocated="10.00 MiB"),
     "50.00 GiB free on a card of 1.00 GiB"),
    (dict(requested="0 bytes", total="0 bytes", free="0 bytes", allocated="0 bytes", unallocated="0 bytes"),
     "the card's total is 0 bytes"),
    (dict(total="24.00 GiB", free="1.00 GiB", allocated="30.00 GiB", unallocated="1.00 GiB"),
     "31.00 GiB reserved by PyTorch on a card of 24.00 GiB"),
    (dict(free="-10.00 MiB"), "a negative size (-10.00 MiB)"),
    (dict(requested="-2.00 GiB"), "a negative size (-2.00 GiB)"),
    (dict(allocated="-300.00 MiB"), "a negative size (-300.00 MiB)"),
])
def test_impossible_figures_are_refused_in_one_line_naming_the_source(tmp_path, figures, said):
    path = tmp_path / "oom.txt"
    path.write_text(message(**figures))
    with pytest.raises(DiagnoseError, match=r"figures no allocator's state has") as refused:
        diagnose(path)
    assert said in str(refused.value) and str(path) in str(refused.value)
    for args in ([path], [path, "--json"]):
        done = run_cli(*args)
        assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"alloctune: error: {path}: figures no allocator's state has") and said in \
            done.stderr
    # one rank of a log with impossible figures: the log is refused, naming the rank
    log = tmp_path / "ranks.log"
    log.write_text("".join(f"[rank{r}]: " + (message(**figures) if r == 1 else message()) for r in range(3)))
    assert f"{log} (rank 1): figures no allocator's state has" in run_cli(log).stderr


@pytest.mark.parametrize("source, conf, basis", [
    (PUBLIC / "v2_2-wrapped-frag.txt", "expandable_segments:True", "verdict"),     # the verdict's suggestion
    (PUBLIC / "v1early-cached.txt", "max_split_size_mb:512", "verdict"),           # a torch without expandable ones
    (ROOT / "tests" / "fixtures" / "oom" / "h200" / "frag" / "oom-rank0.pickle", "expandable_segments:True",
     "replay"),
    (PUBLIC / "v2_1-shortage.txt", None, None),                                    # no setting can help
])
def test_the_setting_recommended_is_one_datum_the_text_and_json_both_say(source, conf, basis):
    d = diagnose(source)
    assert d.recommended_conf == conf and (d.recommendation.basis.value if d.recommendation else None) == basis
    data = json.loads(run_cli(source, "--json").stdout)
    assert data["recommended_conf"] == conf
    assert (data["recommendation"] or {}).get("basis") == basis
    named = [step for step in data["next_steps"] if "PYTORCH_CUDA_ALLOC_CONF=" in step]
    if conf is None:
        assert named == []
    else:   # the first step names it, and no step names another
        assert f"PYTORCH_CUDA_ALLOC_CONF={conf} " in data["next_steps"][0]
        assert all(f"PYTORCH_CUDA_ALLOC_CONF={conf} " in step for step in named)
    assert data["next_steps"] == d.next_steps


GiB = 2**30
RANK0 = message(requested="1.50 GiB", gpu=0, free="1.00 GiB", allocated="70.00 GiB", unallocated="3.00 GiB")
RANK1 = message(requested="2.00 GiB", gpu=1, free="0.50 GiB", allocated="77.00 GiB", unallocated="0.10 GiB")


def interleaved(*ranks: str) -> str:
    """A torchrun log: each rank's lines prefixed `[rankN]: `, the ranks' lines interleaved."""
    per_rank = [("step 10 loss 2.31\nTraceback (most recent call last):\n  File \"train.py\", line 9\n" + text)
                .splitlines() for text in ranks]
    return "".join(f"[rank{r}]: {lines[i]}\n" for i in range(max(map(len, per_rank)))
                   for r, lines in enumerate(per_rank) if i < len(lines))


def test_a_log_of_two_ranks_reads_both_names_them_and_details_the_worst(tmp_path):
    log = tmp_path / "torchrun.log"
    log.write_text(interleaved(RANK0, RANK1))
    d = diagnose(log)
    assert [(o.rank, o.facts.gpu, o.facts.requested, o.verdict.cause) for o in d.ooms] == [
        (0, 0, int(1.5 * GiB), Cause.FRAGMENTATION), (1, 1, 2 * GiB, Cause.SHORTAGE)]
    assert d.facts is d.ooms[1].facts and d.message.rank == 1   # the shortage: no setting fixes it
    text = " ".join(run_cli(log).stdout.split())
    assert "2 OOMs read; the worst is detailed below" in text
    assert "GPU 0 (rank 0): tried to allocate 1.50 GiB with 70.00 GiB live: fragmentation" in text
    assert "GPU 1 (rank 1): tried to allocate 2.00 GiB with 77.00 GiB live: shortage (detailed below)" in text
    assert "OOM on GPU 1 (rank 1): tried to allocate 2.00 GiB" in text
    data = json.loads(run_cli(log, "--json").stdout)
    assert [(o["rank"], o["requested_bytes"], o["cause"]) for o in data["ooms"]] == [
        (0, int(1.5 * GiB), "fragmentation"), (1, 2 * GiB, "shortage")]
    assert data["message"]["rank"] == 1 and data["cause"] == "shortage"
    # the same two ranks of fragmentation: the one that needs the most memory
    log.write_text(interleaved(RANK0, RANK0.replace("GPU 0", "GPU 1").replace("70.00 GiB", "71.00 GiB")))
    d = diagnose(log)
    assert [o.rank for o in d.ooms] == [0, 1] and d.message.rank == 1


def test_with_a_snapshot_the_list_of_several_says_the_snapshots_is_detailed_not_the_worst(tmp_path):
    """A log of two OOMs, a shortage and the snapshot's fragmentation, given with the snapshot: the snapshot's is
    detailed, and the heading once said the worst was (the shortage)."""
    frag = ROOT / "tests" / "fixtures" / "oom" / "h200" / "frag"
    log = tmp_path / "job.log"
    log.write_text(message("32.00 GiB", total="139.80 GiB", free="1.00 GiB", allocated="130.00 GiB",
                           unallocated="1.00 GiB") + "retrying\n" + (frag / "oom-rank0.txt").read_text())
    text = " ".join(run_cli(frag / "oom-rank0.pickle", log).stdout.split())
    assert "2 OOMs read; the one the snapshot shows is detailed below:" in text and "the worst" not in text, text
    assert "tried to allocate 32.00 GiB with 130.00 GiB live: shortage -" in text
    assert "tried to allocate 1.46 GiB with 1.95 GiB live: fragmentation (detailed below)" in text
    assert "Verdict (fragmentation)" in text


def test_the_committed_rank_prefixed_log_names_its_rank():
    d = diagnose(PUBLIC / "v2_x-rank-prefix.txt")
    assert [(o.rank, o.facts.gpu) for o in d.ooms] == [(4, 4)] and d.message.rank == 4
    assert "OOM on GPU 4 (rank 4): tried to allocate 64.00 MiB" in run_cli(PUBLIC / "v2_x-rank-prefix.txt").stdout


def test_every_oom_of_a_plain_log_is_read_once(tmp_path):
    """No prefixes: each message in turn (GPUs tell them apart). A message printed twice (a chained traceback), and
    the launcher's summary repeating a rank's error without its prefix, are one OOM."""
    log = tmp_path / "job.log"
    log.write_text("epoch 1\n" + RANK0 + "During handling of the above exception, another exception occurred:\n"
                   + RANK0 + "retrying with a smaller batch\n" + RANK1)
    assert [(o.rank, o.facts.gpu) for o in diagnose(log).ooms] == [(None, 0), (None, 1)]
    log.write_text(interleaved(RANK0) + "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
                   + "Root Cause (first observed failure):\n" + RANK0)
    assert [(o.rank, o.facts.gpu) for o in diagnose(log).ooms] == [(0, 0)]


def test_a_long_log_is_read_only_near_its_ooms(tmp_path):
    """Tens of megabytes of a training log are searched for the words of an OOM and only the lines around them are
    joined and read (a 50 MB log took 7 s, 1.3 s since): an OOM hard-wrapped at 40 columns in the first lines and
    one at the end are both read."""
    wrapped = "\n".join(RANK0[i:i + 40] for i in range(0, len(RANK0), 40))
    filler = "".join(f"step {i} loss 2.31 lr 3e-4 tokens/s 123456.7 grad_norm 0.98 mem 71.2GiB\n"
                     for i in range(300_000))
    text = "epoch 1\n" + wrapped + "\n" + filler + RANK1
    assert len(text) > 20 * 2**20 and len(excerpt(text)) < 2 * 2**20
    log = tmp_path / "train.log"
    log.write_text(text)
    assert [(o.facts.gpu, o.verdict.cause) for o in diagnose(log).ooms] == [(0, Cause.FRAGMENTATION),
                                                                            (1, Cause.SHORTAGE)]


@pytest.mark.parametrize("largest", ["last", "first"])
def test_a_log_of_many_caught_ooms_lists_a_few_and_counts_the_rest(tmp_path, largest):
    """A job that recovers from each OOM (fairseq) leaves one message a step: the text lists eight, the one detailed
    (the largest request) among them wherever it comes, and counts the rest by cause; --json holds every one."""
    log = tmp_path / "fairseq.log"
    sizes = range(500, 520) if largest == "last" else range(519, 499, -1)
    log.write_text("".join(message(requested=f"{size}.00 MiB", free="1.00 GiB", allocated="74.00 GiB",
                                   unallocated="2.00 GiB") + "| WARNING: attempting to recover from OOM\n"
                           for size in sizes))
    text = " ".join(run_cli(log).stdout.split())
    assert "20 OOMs read" in text and text.count(" with 74.00 GiB live: ") == 8
    assert "GPU 0: tried to allocate 519.00 MiB with 74.00 GiB live: fragmentation (detailed below)" in text
    assert "and 12 more (12 fragmentation): `--json`'s ooms lists every one" in text
    assert len(json.loads(run_cli(log, "--json").stdout)["ooms"]) == 20


def test_a_snapshot_details_its_own_oom_among_the_messages(tmp_path):
    """A snapshot and a log of several OOMs: the verdict is the snapshot's OOM's, the others are listed."""
    import shutil

    frag = ROOT / "tests" / "fixtures" / "oom" / "h200" / "frag"
    shutil.copy(frag / "oom-rank0.pickle", tmp_path / "oom-rank0.pickle")
    (tmp_path / "oom-rank0.txt").write_text(RANK1 + (frag / "oom-rank0.txt").read_text())
    d = diagnose(tmp_path / "oom-rank0.pickle", confs=["expandable_segments:True"])
    assert len(d.ooms) == 2 and d.facts is d.ooms[1].facts and d.verdict.cause is Cause.FRAGMENTATION
    assert d.recommended_conf == "expandable_segments:True"


ES = "expandable_segments:True"


def test_the_few_known_problems_that_matter_for_the_job_and_the_rest_counted():
    from alloctune.diagnosis.problems import MOST_SHOWN, Job, known_problems
    from alloctune.settings.known import Feature, Versions
    from alloctune.settings.versions import parse_version

    unknown = known_problems(ES, Job())
    every = known_problems(ES, Job(), everything=True)
    assert len(unknown.shown) == MOST_SHOWN and set(unknown.shown + unknown.hidden) == set(every.shown)
    assert every.hidden == () and every.shown[:MOST_SHOWN] == unknown.shown
    # worst first, then the fewest conditions: one feature each before the pairs
    assert [len(p.when) for p in unknown.shown] == [1, 1, 1]
    # a torch the message's layout names: a problem of releases it lies outside of is not counted
    old = known_problems(ES, Job(versions=Versions(parse_version("2.1"), parse_version("2.2"))), everything=True)
    assert {p.id for p in every.shown} - {p.id for p in old.shown} == {"alloc-conf-unread-2.9"}
    # what the job was seen doing comes first; a trial's whole record leaves only what applies
    seen = known_problems(ES, Job(seen=frozenset({Feature.CUDA_GRAPHS, Feature.NCCL})))
    assert seen.shown[0].when == {Feature.CUDA_GRAPHS, Feature.NCCL} and seen.applies(seen.shown[0])
    whole = known_problems(ES, Job(seen=frozenset({Feature.CUDA_IPC}), whole=True))
    assert [p.id for p in whole.shown] == ["expandable-cuda-ipc-pidfd"] and len(whole.hidden) == len(every.shown) - 1


def test_the_known_problems_step_names_a_few_and_the_flag_lists_them_all(tmp_path):
    from alloctune.diagnosis.problems import MOST_SHOWN

    source = PUBLIC / "v2_2-wrapped-frag.txt"
    d, every = diagnose(source), diagnose(source, all_problems=True)
    hidden = len(every.known_problems) - MOST_SHOWN
    step, all_step = (" ".join(x.next_steps[1].split()) for x in (d, every))
    assert step.startswith(f"before using {ES}, check the job against its known problems on torch from 2.2 (as the "
                           "message's layout tells): it can break the job if the job sent or received CUDA tensors")
    assert step.endswith(f"and {hidden} more (`alloctune diagnose --all-problems` lists them)")
    assert "any torch" not in step and step.count("https://") == MOST_SHOWN
    assert all_step.count("https://") == len(every.known_problems) and "more (" not in all_step
    text = run_cli(source, "--all-problems").stdout
    assert " ".join(text.split()).count("https://") == len(every.known_problems)
    data = json.loads(run_cli(source, "--json").stdout)["known_problems"]
    assert len(data["problems"]) == MOST_SHOWN and len(data["hidden"]) == hidden and data["features_whole"] is False


def test_a_results_folder_tells_what_the_job_did(tmp_path):
    from alloctune.results.records import TrialRecord, TrialState
    from alloctune.results.trials import TrialStore

    store = TrialStore(tmp_path / "trials.jsonl")
    store.append(TrialRecord("w", "h", "", 0, "torch-2.11.0", "cuda", TrialState.OOM, features=["cuda_ipc"],
                             error=(PUBLIC / "v2_2-wrapped-frag.txt").read_text()))
    d = diagnose(tmp_path)
    assert d.problems.job.whole and [p.id for p in d.known_problems] == ["expandable-cuda-ipc-pidfd"]
    assert ("it can break the job as the job sent or received CUDA tensors between processes "
            "(https://github.com/pytorch/pytorch/issues/165685); and ") in " ".join(d.next_steps[1].split())
