"""What a path names, said as it is (issue 29): a trace, workload trace or lock that is a directory, a FIFO or a
device is named so, never 'does not exist'; a FIFO without a writer is read at once, not waited on; a byte-order
mark starts any text file; an argument of 100,000 characters is not echoed whole; '-' is standard output for -o and
standard input for inputs, never a file named '-'; an empty path is refused; replay's heading and JSON say which
settings fit and which have no figures."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from bounded import bounded_cli
from clirun import ROOT, in_process
from folders import choice, make_folder, repeats
from waiting import wait_until

TRACE = ROOT / "workloads" / "traces" / "transformer-packed-h200.xz"
PACKED = ROOT / "workloads" / "transformer-packed.yaml"


def one_line(run) -> str:
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run.stderr
    return run.stderr


@pytest.fixture
def folder(tmp_path):
    return make_folder(tmp_path / "w", repeats("") + repeats("expandable_segments:True", reserved=10.0),
                       [choice("expandable_segments:True")]).path


def test_a_trace_that_is_no_file_is_said_for_what_it_is(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for command in ("replay", "search"):
        assert f"'{tmp_path}' is a directory, not a trace" in one_line(in_process(command, tmp_path))
    start = time.monotonic()   # no writer: read at once as empty, never waited on
    assert f"'{fifo}' is empty" in one_line(in_process("replay", fifo))
    assert "is empty" in one_line(in_process("diagnose", fifo))
    assert time.monotonic() - start < 30
    assert "neither a PyTorch memory snapshot (pickle) nor an alloctune trace" in one_line(
        in_process("replay", "/dev/urandom"))


def test_yaml_that_does_not_parse_is_one_line_saying_where_and_what(tmp_path):
    """PyYAML's own message spans seven lines, quoting the input with carets: the workload's and the grid's say it
    in one, with the line and column."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\nb: c\n")
    problem = "line 2, column 2: expected ',' or ']', but got ':' (while parsing a flow sequence at line 1, column 4)"
    assert one_line(in_process("sweep", bad)) == f"alloctune: error: {bad}: not valid YAML: {problem}\n"
    assert one_line(in_process("replay", TRACE, "--grid", bad)) == (f"alloctune: error: grid file {bad} is not "
                                                                    f"valid YAML: {problem}\n")


def test_a_fifo_with_a_writer_is_read_as_a_pipe(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "wb") as pipe:   # waits in open for the reader (the kernel's wait_for_partner)
            pipe.write(TRACE.read_bytes())

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    wchan = Path(f"/proc/self/task/{writer.native_id}/wchan")
    wait_until(lambda: wchan.read_text() == "wait_for_partner", 30, "the writer waits for a reader")
    run = in_process("replay", fifo, "--conf", "expandable_segments:True", "--json")
    writer.join(30)
    assert run.returncode == 0, run.stderr
    assert {row["conf"] for row in json.loads(run.stdout)["results"]} == {"default", "expandable_segments:True"}


@pytest.mark.parametrize("target, says", [("/dev/urandom", "is a character device, not a regular file"),
                                          ("DIR", "is a directory, not a regular file"),
                                          ("FIFO", "is a FIFO (named pipe), not a regular file"),
                                          ("MISSING", "does not exist")])
def test_a_workload_trace_or_entry_that_is_no_file_is_named(tmp_path, target, says):
    for name in ("FIFO", "FIFO.py"):
        os.mkfifo(tmp_path / name)
    for name in ("DIR", "DIR.py"):
        (tmp_path / name).mkdir()
    docs = [("trace", f"name: w\nkind: transformer\nsteps: 4\ntrace: {target}\n")]
    if not target.startswith("/"):   # an entry is a .py file
        docs.append(("entry", f"name: w\nentry: {target}.py:make\nsteps: 4\n"))
    for key, doc in docs:
        (tmp_path / "w.yaml").write_text(doc)
        error = one_line(in_process("sweep", tmp_path / "w.yaml", "--backend", "sim", "--out", tmp_path / "r"))
        assert f"key '{key}'" in error and says in error, error
    assert not (tmp_path / "r").exists()


def test_a_file_that_fails_to_read_is_named_by_every_reader(tmp_path):
    """/proc/self/mem opens as a regular file of no size, and its first read fails (EIO): each kind of input names
    the file it could not read, itself or through a link named as that kind, in one line, and nothing is written."""
    out = tmp_path / "r"
    readers = [(["replay", "PATH"], "trace.xz"), (["search", "PATH"], "trace.xz"), (["fleet", "PATH"], "trace.xz"),
               (["diagnose", "PATH"], "oom.pickle"), (["sweep", "PATH", "--backend", "sim", "--out", out], "w.yaml"),
               (["sweep", PACKED, "--backend", "sim", "--grid", "PATH", "--out", out], "grid.txt"),
               (["sweep", PACKED, "--preset", "h200", "--backend", "sim", "--trace", "PATH", "--out", out], "trace.xz")]
    for args, link in readers:
        (tmp_path / link).unlink(missing_ok=True)
        (tmp_path / link).symlink_to("/proc/self/mem")
        for path in (tmp_path / link, "/proc/self/mem")[:1 if link == "w.yaml" else 2]:   # a workload is a .yaml
            run = in_process(*(path if a == "PATH" else a for a in args))
            assert f"cannot read {str(path)!r}: Input/output error" in one_line(run), (args, run.stderr)
    assert not out.exists()


def test_a_byte_order_mark_starts_any_text_file(tmp_path, folder):
    bom = "\ufeff"
    grid = tmp_path / "grid.txt"
    grid.write_text(bom + "expandable_segments:True\n", encoding="utf-8")
    yaml_grid = tmp_path / "grid.yaml"
    yaml_grid.write_text(bom + "- expandable_segments:True\n", encoding="utf-8")
    (tmp_path / "traces").mkdir()   # the workload's presets name their trace by a relative path
    shutil.copy(TRACE, tmp_path / "traces")
    workload = tmp_path / "w.yaml"
    workload.write_text(bom + PACKED.read_text(), encoding="utf-8")
    for args in (["--grid", grid], ["--grid", yaml_grid]):
        run = in_process("sweep", PACKED, "--preset", "h200", "--backend", "sim", *args, "--out", tmp_path / f"from-{args[1].name}")
        assert run.returncode == 0, run.stderr
    run = in_process("sweep", workload, "--preset", "h200", "--backend", "sim", "--conf", "expandable_segments:True",
                     "--out", tmp_path / "bom-workload")
    assert run.returncode == 0, run.stderr
    for name in ("sweep.json", "choice.json"):
        path = folder / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    run = in_process("export", folder)
    assert run.returncode == 0 and "expandable_segments:True" in run.stdout, run.stderr


def test_a_fifo_as_the_lock_file_is_named(folder):
    os.mkfifo(folder / ".lock")
    error = one_line(in_process("report", folder))
    assert f"{folder / '.lock'}, the folder's writer lock, is a FIFO (named pipe), not a regular file" in error


def test_a_long_argument_is_not_echoed_whole(folder):
    long = "x" * 100_000
    for args in (["replay", TRACE, "--conf", long], ["replay", long], ["export", folder, "--conf", long],
                 ["export", folder, "--format", long], ["sweep", PACKED, "--backend", long], ["report", long]):
        run = in_process(*args)
        assert run.returncode == 2 and len(run.stderr) < 3000 and "100,0" in run.stderr, (args[0], run.stderr[:300])


def test_dash_is_standard_output_for_o_and_input_for_inputs_never_a_file(tmp_path, folder):
    run = in_process("export", folder, "-o", "-", cwd=tmp_path)
    assert run.returncode == 0 and "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in run.stdout, run.stderr
    for args in (["compare", folder, folder, "-o", "-"], ["record", "-o", "-", "--", "true"],
                 ["sweep", PACKED, "--backend", "sim", "--out", "-"], ["sweep", PACKED, "--backend", "sim",
                                                                        "--results", "-"]):
        assert "'-' (standard output) cannot be" in in_process(*args, cwd=tmp_path).stderr
    for command in ("report", "export", "compare"):
        assert "'-' (standard input) cannot be a results folder" in one_line(in_process(command, "-", cwd=tmp_path))
    assert os.listdir(tmp_path) == ["w"]


def test_an_empty_path_is_refused(tmp_path, folder):
    for args in (["sweep", PACKED, "--backend", "sim", "--results", ""], ["sweep", PACKED, "--backend", "sim",
                                                                          "--out", ""],
                 ["export", folder, "-o", ""], ["compare", folder, "-o", ""], ["record", "-o", "", "--", "true"]):
        assert "an empty path cannot be" in in_process(*args, cwd=tmp_path).stderr
    for args in (["replay", ""], ["diagnose", ""], ["report", ""]):
        assert "expected a path" in one_line(in_process(*args, cwd=tmp_path))
    assert os.listdir(tmp_path) == ["w"]


def test_replay_says_how_many_fit_and_keeps_settings_without_figures_apart():
    run = in_process("replay", TRACE, "--device-memory", "1GiB", "--conf", "expandable_segments:True",
                     "--conf", "backend:cudaMallocAsync", env={"COLUMNS": "120"})
    assert run.returncode == 0, run.stderr
    assert "0 of 2 settings fit, ranked by peak reserved" in run.stdout and "settings that fit" not in run.stdout
    data = json.loads(in_process("replay", TRACE, "--device-memory", "1GiB", "--conf", "expandable_segments:True",
                                 "--conf", "backend:cudaMallocAsync", "--json").stdout)
    assert [row["conf"] for row in data["results"]] == ["default", "expandable_segments:True"]
    assert all(row["num_ooms"] for row in data["results"])
    assert [row["conf"] for row in data["skipped"]] == ["backend:cudaMallocAsync"] and data["skipped"][0]["reason"]


@pytest.mark.parametrize("kind", ["FIFO", "/dev/zero", "sparse"])
def test_a_best_env_that_is_no_file_or_too_large_is_rewritten_not_read(tmp_path, folder, kind):
    assert in_process("report", folder).returncode == 0   # decided once: a best.env to read back
    best = folder / "best.env"
    best.unlink()
    if kind == "FIFO":   # no writer: never waited on
        os.mkfifo(best)
    elif kind == "sparse":   # 1.5 GB of holes: read whole, it took 16 GB
        with open(best, "wb") as f:
            f.truncate(3 * 2**29)
    else:
        best.symlink_to(kind)
    run = bounded_cli("report", folder, timeout=120)
    assert run.returncode == 0, run.stderr
    assert best.is_file() and not best.is_symlink() and "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in \
        best.read_text()


@pytest.mark.parametrize("name, what, reader", [("sweep.json", "a results file", "report"),
                                                ("choice.json", "a results file", "export"),
                                                ("trials.jsonl", "a trials file", "report")])
@pytest.mark.parametrize("kind", ["FIFO", "/dev/zero"])
def test_a_file_alloctune_wrote_that_is_now_no_file_is_refused_in_one_line_not_read(folder, name, what, reader,
                                                                                    kind):
    """A FIFO read as empty was 'not valid JSON', or no trials at all: what a sweep wrote and alloctune reads back is
    a regular file or one line saying what is there instead, never waited on nor read."""
    path = folder / name
    path.unlink()
    if kind == "FIFO":
        os.mkfifo(path)
    else:
        path.symlink_to(kind)
    said = "a FIFO (named pipe)" if kind == "FIFO" else "a character device"
    for args in ([reader, folder], ["compare", folder, folder, "-o", folder.parent / "c"]):
        run = bounded_cli(*args, timeout=60)
        assert f"{str(path)!r} is {said}, not a regular file: alloctune reads {what} from a file" in one_line(run)
    assert path.is_fifo() if kind == "FIFO" else path.is_symlink()


def test_a_sweeps_trace_read_from_a_fifo_is_refused_as_no_file(tmp_path):
    """A sweep reads its trace again, by its digest and on resume: one read once from a FIFO (a writer there) is
    refused in one line, before any folder exists, never waited on a second time."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def write() -> None:
        with contextlib.suppress(BrokenPipeError), open(fifo, "wb") as pipe:
            pipe.write(TRACE.read_bytes())

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    run = bounded_cli("sweep", PACKED, "--preset", "h200", "--backend", "sim", "--trace", fifo, "--conf",
                      "expandable_segments:True", "--out", tmp_path / "r", timeout=120)
    writer.join(30)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert f"'{fifo}' is a FIFO (named pipe), not a regular file: alloctune reads a trace from a file" in run.stderr
    assert not (tmp_path / "r").exists()


def test_a_command_whose_program_is_a_fifo_is_not_waited_on(tmp_path):
    from alloctune.workload.command import CommandSpec, command_python

    fifo = tmp_path / "train"
    os.mkfifo(fifo)
    done = []
    reader = threading.Thread(target=lambda: done.append(command_python(CommandSpec(argv=(str(fifo),)))),
                              daemon=True)
    reader.start()
    reader.join(30)
    assert done == [None]
