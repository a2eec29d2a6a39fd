"""`alloctune diagnose` on logs as users paste them (an audit on logs it had not seen): a shortage's reasons agree with
its shortfall whatever the driver kept, the memory a process held beyond PyTorch's cache is a figure (and a note where
it is more than a CUDA context; the steps to free it where it covers the shortfall; "if" where the process is
guessed), an out-of-memory error in other words is named by what its words tell, in a log as in a results folder, and
a log of tens of thousands of caught OOMs is read (its time: benchmarks/diagnose_speed.py)."""
import json

import pytest
from clirun import cli

from alloctune.diagnosis import diagnose, sources
from alloctune.diagnosis.facts import Cause
from alloctune.results.records import TrialRecord, TrialState
from alloctune.results.trials import TrialStore

GiB, MiB = 2**30, 2**20


def run_cli(*args):
    """`alloctune diagnose ARGS` 120 columns wide: the lines the text checks look for are not wrapped."""
    return cli("diagnose", *args, env={"COLUMNS": "120"}, timeout=120)


def message(requested, total, free, this_process, allocated, unallocated, gpu=0, pid=None):
    """A torch 2.2+ message, as one rank's traceback ends, with these figures (NVML's for this process, or, where
    NVML could not tell it, as it lists any process: for `pid`)."""
    process = "Including non-PyTorch memory, this process has" if pid is None else f"Process {pid} has"
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {requested}. GPU {gpu} has a total "
            f"capacity of {total} of which {free} is free. {process} "
            f"{this_process} memory in use. Of the allocated memory {allocated} is allocated by PyTorch, and "
            f"{unallocated} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
            "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
            "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n")


def test_a_shortage_says_the_live_tensors_do_not_fit_where_they_fall_short(tmp_path):
    """The card less this process's NVML figure (450 MiB) is more than the free memory (100 MiB): the driver's share.
    The reason once compared the tensors with the card less NVML's figures and said 'within', beside a shortfall of
    207 MiB; both now rest on the cache and the free memory."""
    path = tmp_path / "oom.txt"
    path.write_text(message("512.00 MiB", "79.15 GiB", "100.00 MiB", "78.70 GiB", "78.00 GiB", "204.80 MiB"))
    v = diagnose(path).verdict
    assert v.cause is Cause.SHORTAGE and v.sure and v.figures.shortfall == round(207.2 * MiB)
    assert v.reasons[0] == ("live tensors 78.00 GiB + the request 512.00 MiB = 78.50 GiB, 207.20 MiB more than the "
                            "78.30 GiB PyTorch could have (its cache + what was free) of the 79.15 GiB card")
    assert "fall 207.20 MiB short" in v.reasons[1] and "PyTorch could have" in v.summary
    # at the limit (nothing short, within the rounding): within
    path.write_text(message("20.00 MiB", "7.79 GiB", "20.00 MiB", "7.76 GiB", "7.21 GiB", "978.50 KiB"))
    v = diagnose(path).verdict
    assert (v.cause, v.figures.shortfall) == (Cause.SHORTAGE, 0) and ", within the 7.23 GiB " in v.reasons[0]


def test_what_the_process_held_beyond_pytorchs_cache_is_a_figure_and_a_note_where_it_is_more_than_a_context(
        tmp_path):
    """JAX, CuPy or TensorRT in the process took 67 GiB of an 80 GiB card: a 'true shortage' of 12 GiB on it said
    nothing of where the memory went, and then it said the live tensors themselves did not fit in the 11.47 GiB
    'this process can have' beside a note that the process held 67.67 GiB more."""
    path = tmp_path / "oom.txt"
    path.write_text(message("2.00 GiB", "79.15 GiB", "312.00 MiB", "78.84 GiB", "10.12 GiB", "1.05 GiB"))
    d = diagnose(path)
    outside = round(78.84 * GiB) - (round(10.12 * GiB) + round(1.05 * GiB))
    assert d.verdict.numbers["non_pytorch"] == outside and d.verdict.cause is Cause.SHORTAGE
    note = next(n for n in d.verdict.notes if n.startswith("this process held 67.67 GiB beyond PyTorch's 11.17 GiB"))
    # cuBLAS and cuDNN workspaces come from PyTorch's cache (torch 1.11 on): not named outside it
    assert "cuBLAS and cuDNN handles" in note and "workspace" not in note
    assert "the 11.47 GiB PyTorch could have (its cache + what was free)" in d.verdict.reasons[0]
    assert "this process can have" not in " ".join(d.verdict.reasons)
    assert "this process held 67.67 GiB beyond PyTorch's" in d.verdict.summary
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=false" in d.next_steps[0] and "set_memory_growth" in d.next_steps[0]
    assert not [s for s in d.next_steps if "live tensors themselves do not fit" in s or "larger card" in s]
    data = json.loads(run_cli(path, "--json").stdout)
    assert data["verdict"]["numbers"]["non_pytorch"] == outside and data["verdict"]["guessed_pid"] is None
    assert data["next_steps"] == d.next_steps and data["verdict"]["notes"] == d.verdict.notes
    assert "non pytorch 67.67 GiB" in run_cli(path).stdout
    # 1.50 GiB beyond PyTorch's cache, 512 MiB beyond a context: less than the 660.80 MiB short, the tensors do not fit
    path.write_text(message("2.00 GiB", "13.00 GiB", "312.00 MiB", "12.67 GiB", "10.12 GiB", "1.05 GiB"))
    d = diagnose(path)
    assert d.verdict.cause is Cause.SHORTAGE and [n for n in d.verdict.notes if "beyond PyTorch's" in n]
    assert d.next_steps[-1] == "an allocator setting cannot help: the live tensors themselves do not fit"
    assert not [s for s in d.next_steps if "XLA_PYTHON" in s]
    # a CUDA context's worth (500 MiB) is a figure, and no note
    path.write_text(message("2.00 GiB", "79.15 GiB", "312.00 MiB", "11.66 GiB", "10.12 GiB", "1.05 GiB"))
    v = diagnose(path).verdict
    assert v.numbers["non_pytorch"] == round(11.66 * GiB) - round(11.17 * GiB)
    assert not [n for n in v.notes if "beyond PyTorch" in n]


def test_the_memory_of_a_process_taken_to_be_this_one_is_said_with_an_if(tmp_path):
    """Inside a container NVML lists this process as 'Process N has ...': the one taken to be it is a guess, which
    the note, the steps and --json say (the note once said 'NVML's figure for it', --json null for this process)."""
    path = tmp_path / "oom.txt"
    path.write_text(message("2.00 GiB", "79.15 GiB", "312.00 MiB", "78.84 GiB", "10.12 GiB", "1.05 GiB", pid=4242))
    d = diagnose(path)
    assert d.facts.guessed_pid == 4242 and any("process 4242 (78.84 GiB) is taken to be it" in w for w in d.warnings)
    assert [n for n in d.verdict.notes if n.startswith("process 4242, if it is this one (the message does not say "
                                                       "which is), held 67.67 GiB beyond PyTorch's 11.17 GiB")]
    assert "process 4242, if it is this one" in d.verdict.summary and "(if process 4242 is this one)" in d.next_steps[0]
    data = json.loads(run_cli(path, "--json").stdout)
    assert data["message"]["this_process_bytes"] is None and data["verdict"]["guessed_pid"] == 4242
    assert data["verdict"]["notes"] == d.verdict.notes and data["next_steps"] == d.next_steps
    assert "process 4242, if it is this one" in " ".join(run_cli(path).stdout.split())


# Out-of-memory lines without the caching allocator's message, and what the refusal says each is
OTHER_WORDS = [
    ("RuntimeError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 63.98 GiB of which "
     "1.00 GiB is free. Of the allocated memory 60.12 GiB is allocated by PyTorch, and 1.05 GiB is reserved by PyTorch "
     "but unallocated.", "PyTorch's message on ROCm (HIP), not CUDA's"),
    ("RuntimeError: MPS backend out of memory (MPS allocated: 17.50 GB, other allocations: 1.20 GB, max allowed: "
     "18.13 GB). Tried to allocate 512.00 MB on private pool.", "PyTorch's message on Apple's MPS backend, not CUDA's"),
    ("[12345.678] Out of memory: Killed process 4242 (torchrun) total-vm:123456kB",
     "it is the kernel's OOM killer's report, on the host's memory, not the GPU's"),
    ('Exception in thread "main" java.lang.OutOfMemoryError: Java heap space',
     "it is Java's error for its heap, on the host's memory, not the GPU's"),
    ("ERROR: ran out of memory while loading the dataset", "its words name neither CUDA nor torch"),
    ("RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests.",
     "where a library caught torch's error and raised its own (vLLM does)"),
]


@pytest.mark.parametrize("line,said", OTHER_WORDS)
def test_an_oom_in_other_words_is_said_by_what_its_words_tell_in_a_log_and_in_a_results_folder(tmp_path, line, said):
    """Every out-of-memory line was blamed on a library that caught torch's error (vLLM), and a sweep trial that kept
    such a line (it counts as an OOM) was said to keep 'no message this reader knows'."""
    path = tmp_path / "job.log"
    path.write_text("step 1\n" + line + "\n")
    done = run_cli(path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"holds a report of running out of memory ('{line[:100]}" in done.stderr, done.stderr
    assert "but no message of torch's CUDA caching allocator, the one with figures" in done.stderr
    assert said in done.stderr and (said.startswith("where") or "vLLM" not in done.stderr), done.stderr
    folder = tmp_path / "run"
    TrialStore(folder / "trials.jsonl").append(TrialRecord("w", "h", "", 0, "torch-2.11.0", "cuda", TrialState.OOM,
                                                           error=line))
    done = run_cli(folder)
    assert done.returncode == 2 and "kept a report of running out of memory" in done.stderr, done.stderr
    assert said in done.stderr and "no message this reader knows" not in done.stderr


def test_a_long_logs_oom_in_other_words_says_how_much_was_read_before_what_it_expected(tmp_path, monkeypatch):
    """'... in its last 64.00 MiB, all that is read of a long log, the one with figures': the figures were the
    message's, not the log's."""
    monkeypatch.setattr(sources, "LOG_TAIL_BYTES", 256 * 1024)
    path = tmp_path / "job.log"
    path.write_text("".join(f"step {i} loss 0.5\n" for i in range(60_000)) + OTHER_WORDS[-1][0] + "\n")
    with pytest.raises(Exception) as refused:
        diagnose(path)
    assert ("but, in its last 256.00 KiB (all that is read of a long log), no message of torch's CUDA caching "
            "allocator, the one with figures (expected 'CUDA out of memory. Tried to allocate ...'): where a library"
            in str(refused.value)), str(refused.value)


def test_an_out_of_memory_error_in_a_librarys_own_words_is_named_and_one_without_any_is_not(tmp_path):
    """vLLM catches torch's OOM and raises its own RuntimeError: 'CUDA out of memory occurred when ...', with no
    figures. Pasted alone, diagnose said the log held no CUDA out-of-memory message."""
    wrapper = ("(VllmWorkerProcess pid=2345) ERROR 05-01 12:00:30 multiproc_worker_utils.py:226] RuntimeError: CUDA "
               "out of memory occurred when warming up sampler with 256 dummy requests. Please try lowering "
               "`max_num_seqs` or `gpu_memory_utilization` when initializing the engine.\n")
    path = tmp_path / "vllm.log"
    path.write_text("INFO 05-01 12:00:00 llm_engine.py:100] Initializing an LLM engine\n" + wrapper)
    for args in ([path], [path, "--json"]):
        done = run_cli(*args)
        assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"alloctune: error: '{path}' holds a report of running out of memory "
                                      "('(VllmWorkerProcess "
                                      "pid=2345) ERROR 05-01 12:00:30 multiproc_worker_utils.py:226] RuntimeError: "
                                      "CUDA out of memory occurred when"), done.stderr
        assert "but no message of torch's CUDA caching allocator" in done.stderr
    # a traceback of another error is no OOM at all
    path.write_text("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\nRuntimeError: mat1 "
                    "and mat2 shapes cannot be multiplied (4096x512 and 1024x4096)\n")
    done = run_cli(path)
    assert done.returncode == 2 and f"'{path}' holds no CUDA out-of-memory message" in done.stderr


def test_a_log_of_tens_of_thousands_of_caught_ooms_is_read_whole(tmp_path):
    """A job that catches its OOMs and runs on (fairseq) logs one each time: 20,000 of them, each with its own
    figures, each read and judged (dropping the repeats compared each with every one kept: hours; its time is
    benchmarks/diagnose_speed.py's)."""
    lines = []
    for i in range(20_000):
        lines.append(f"2021-01-01 12:00:00 | WARNING | fairseq.trainer | OOM: Ran out of memory with exception: CUDA "
                     f"out of memory. Tried to allocate {100 + i % 900}.{i // 900:02d} MiB (GPU 0; 31.75 GiB total "
                     "capacity; 27.43 GiB already allocated; 1.21 GiB free; 29.43 GiB reserved in total by "
                     f"PyTorch)\n2021-01-01 12:00:00 | INFO | train_inner | epoch 001: {i} / 1000 loss=3.2\n")
    path = tmp_path / "train.log"
    path.write_text("".join(lines))
    d = diagnose(path)
    assert len(d.ooms) == 20_000 and d.verdict.cause is Cause.FRAGMENTATION
