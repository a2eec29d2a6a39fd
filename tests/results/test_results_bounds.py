"""Results files that are not what they claim (issue 19): a byte count of 400 digits, a trials file or sweep.json
linked to /dev/zero (a device, refused unread) or larger than alloctune reads. report, compare, export, diagnose and
a resumed sweep each answer in one line with exit 2, within bounded time and memory."""
from __future__ import annotations

import json

from bounded import bounded_cli, one_line_error
from clirun import ROOT, in_process
from folders import choice, make_folder, repeats

PACKED = ROOT / "workloads" / "transformer-packed.yaml"


def finished(path):
    return make_folder(path, repeats("") + repeats("expandable_segments:True", reserved=10.0),
                       [choice("expandable_segments:True")])


def commands(folder, other) -> list[tuple]:
    return [("report", folder), ("compare", folder, other, "-o", other.parent / "compared"), ("export", folder),
            ("diagnose", folder)]


def test_a_400_digit_byte_count_is_named_not_overflowed(tmp_path):
    folder, other = finished(tmp_path / "w-1").path, finished(tmp_path / "w-2").path
    lines = (folder / "trials.jsonl").read_text().splitlines()
    record = json.loads(lines[1])
    record["measurement"]["peak_reserved_bytes"] = int("9" * 400)
    lines[1] = json.dumps(record)
    (folder / "trials.jsonl").write_text("\n".join(lines) + "\n")
    for args in commands(folder, other)[:2] + [("export", folder, "--conf", "default")]:
        error = one_line_error(bounded_cli(*args))
        assert "trials.jsonl:2: field 'measurement.peak_reserved_bytes': expected an integer of at most 64 bits, " \
               "got <an integer of about 400 digits>" in error, args


def test_a_trials_file_linked_to_dev_zero_is_refused_before_a_line_is_read(tmp_path):
    folder, other = finished(tmp_path / "w-1").path, finished(tmp_path / "w-2").path
    (folder / "trials.jsonl").unlink()
    (folder / "trials.jsonl").symlink_to("/dev/zero")
    for args in commands(folder, other)[:2] + [("export", folder, "--conf", "default"), ("diagnose", folder)]:
        assert "trials.jsonl' is a character device, not a regular file: alloctune reads a trials file from a file" \
            in one_line_error(bounded_cli(*args)), args


def test_a_resumed_sweep_refuses_a_trials_file_it_cannot_read(tmp_path):
    out = tmp_path / "run"
    sweep = ("sweep", PACKED, "--preset", "h200", "--backend", "sim", "--out", out, "--conf",
             "expandable_segments:True")
    first = in_process(*sweep)   # the folder to resume: made as any sweep makes it; the resumes are bounded
    assert first.returncode == 0, first.stderr
    record = json.loads((out / "trials.jsonl").read_text().splitlines()[0])
    (out / "trials.jsonl").unlink()
    (out / "trials.jsonl").symlink_to("/dev/zero")
    assert "trials.jsonl' is a character device, not a regular file" in last_line_error(bounded_cli(*sweep,
                                                                                                     timeout=300))
    (out / "trials.jsonl").unlink()
    record["measurement"]["peak_allocated_bytes"] = int("7" * 400)
    (out / "trials.jsonl").write_text(json.dumps(record) + "\n")
    error = last_line_error(bounded_cli(*sweep, timeout=300))
    assert "field 'measurement.peak_allocated_bytes': expected an integer of at most 64 bits" in error


def last_line_error(run) -> str:
    """A sweep says what it resumes before it fails: the error is its last line, and there is no traceback."""
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    last = run.stderr.splitlines()[-1]
    assert last.startswith("alloctune: error: "), run.stderr
    return last


def test_results_files_linked_to_dev_zero_or_too_large_are_refused_unread(tmp_path):
    """A link to /dev/zero is refused before a byte is read, 64 MiB of holes by its size; report decides again
    without reading choice.json: it answers, and puts a file in the link's place."""
    folder, other = finished(tmp_path / "w-1").path, finished(tmp_path / "w-2").path
    said = {"zero": "is a character device, not a regular file: alloctune reads a results file from a file",
            "holes": "is larger than the 64.00 MiB alloctune reads as a results file"}
    for name in ("choice.json", "sweep.json"):
        saved = (folder / name).read_bytes()
        for kind, says in said.items():
            (folder / name).unlink()
            if kind == "zero":
                (folder / name).symlink_to("/dev/zero")
            else:
                with open(folder / name, "wb") as f:
                    f.truncate(64 * 2**20 + 1)
            for args in commands(folder, other)[int(name == "choice.json"):3]:
                assert f"{name}' {says}" in one_line_error(bounded_cli(*args)), (name, kind, args)
        (folder / name).unlink()
        (folder / name).write_bytes(saved)
    (folder / "choice.json").unlink()
    (folder / "choice.json").symlink_to("/dev/zero")
    run = bounded_cli("report", folder)
    assert run.returncode == 0 and "choice.json was a symbolic link to /dev/zero" in run.stderr, run.stderr
    assert json.loads((folder / "choice.json").read_text())["choices"]
