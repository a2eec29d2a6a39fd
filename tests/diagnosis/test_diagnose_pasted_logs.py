"""`alloctune diagnose` on logs as users paste them (an audit on logs it had not seen): a shortage's reasons agree with
its shortfall whatever the driver kept, the memory a process held beyond PyTorch's cache is a figure (and a note where
it is more than a CUDA context), an out-of-memory error a library raised in its own words is named as such, and a log
of tens of thousands of caught OOMs is read in seconds."""
import json
import time

from clirun import cli

from alloctune.diagnosis import diagnose
from alloctune.diagnosis.facts import Cause

GiB, MiB = 2**30, 2**20


def run_cli(*args):
    """`alloctune diagnose ARGS` 120 columns wide: the lines the text checks look for are not wrapped."""
    return cli("diagnose", *args, env={"COLUMNS": "120"}, timeout=120)


def message(requested, total, free, this_process, allocated, unallocated, gpu=0):
    """A torch 2.2+ message, as one rank's traceback ends, with these figures (NVML's for this process)."""
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {requested}. GPU {gpu} has a total "
            f"capacity of {total} of which {free} is free. Including non-PyTorch memory, this process has "
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
                            "78.30 GiB this process can have of the 79.15 GiB card")
    assert "fall 207.20 MiB short" in v.reasons[1] and "this process could have" in v.summary
    # at the limit (nothing short, within the rounding): within
    path.write_text(message("20.00 MiB", "7.79 GiB", "20.00 MiB", "7.76 GiB", "7.21 GiB", "978.50 KiB"))
    v = diagnose(path).verdict
    assert (v.cause, v.figures.shortfall) == (Cause.SHORTAGE, 0) and ", within the 7.23 GiB " in v.reasons[0]


def test_what_the_process_held_beyond_pytorchs_cache_is_a_figure_and_a_note_where_it_is_more_than_a_context(
        tmp_path):
    """JAX, CuPy or TensorRT in the process took 67 GiB of an 80 GiB card: a 'true shortage' of 12 GiB on it said
    nothing of where the memory went."""
    path = tmp_path / "oom.txt"
    path.write_text(message("2.00 GiB", "79.15 GiB", "312.00 MiB", "78.84 GiB", "10.12 GiB", "1.05 GiB"))
    d = diagnose(path)
    outside = round(78.84 * GiB) - (round(10.12 * GiB) + round(1.05 * GiB))
    assert d.verdict.numbers["non_pytorch"] == outside
    assert [n for n in d.verdict.notes if n.startswith("this process held 67.67 GiB beyond PyTorch's 11.17 GiB")]
    data = json.loads(run_cli(path, "--json").stdout)
    assert data["verdict"]["numbers"]["non_pytorch"] == outside
    assert "non pytorch 67.67 GiB" in run_cli(path).stdout
    # a CUDA context's worth (500 MiB) is a figure, and no note
    path.write_text(message("2.00 GiB", "79.15 GiB", "312.00 MiB", "11.66 GiB", "10.12 GiB", "1.05 GiB"))
    v = diagnose(path).verdict
    assert v.numbers["non_pytorch"] == round(11.66 * GiB) - round(11.17 * GiB)
    assert not [n for n in v.notes if "beyond PyTorch" in n]


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
        assert done.stderr.startswith(f"alloctune: error: '{path}' reports running out of memory ('(VllmWorkerProcess "
                                      "pid=2345) ERROR 05-01 12:00:30 multiproc_worker_utils.py:226] RuntimeError: "
                                      "CUDA out of memory occurred when"), done.stderr
        assert "holds no message of torch's CUDA caching allocator" in done.stderr
    # a traceback of another error is no OOM at all
    path.write_text("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\nRuntimeError: mat1 "
                    "and mat2 shapes cannot be multiplied (4096x512 and 1024x4096)\n")
    done = run_cli(path)
    assert done.returncode == 2 and f"'{path}' holds no CUDA out-of-memory message" in done.stderr


def test_a_log_of_tens_of_thousands_of_caught_ooms_is_read_in_seconds(tmp_path):
    """A job that catches its OOMs and runs on (fairseq) logs one each time: 20,000 of them, each with its own
    figures. Dropping the repeats compared each with every one kept: hours."""
    lines = []
    for i in range(20_000):
        lines.append(f"2021-01-01 12:00:00 | WARNING | fairseq.trainer | OOM: Ran out of memory with exception: CUDA "
                     f"out of memory. Tried to allocate {100 + i % 900}.{i // 900:02d} MiB (GPU 0; 31.75 GiB total "
                     "capacity; 27.43 GiB already allocated; 1.21 GiB free; 29.43 GiB reserved in total by "
                     f"PyTorch)\n2021-01-01 12:00:00 | INFO | train_inner | epoch 001: {i} / 1000 loss=3.2\n")
    path = tmp_path / "train.log"
    path.write_text("".join(lines))
    started = time.monotonic()
    d = diagnose(path)
    assert time.monotonic() - started < 60
    assert len(d.ooms) == 20_000 and d.verdict.cause is Cause.FRAGMENTATION
