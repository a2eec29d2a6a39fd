"""What a new user found diagnose getting wrong (issue 19): advice an old torch cannot take, a figure the message
cannot give, logs broken over lines the way real logs break them, and a simulated sweep's OOM trials."""
from __future__ import annotations

import json
import re
import shlex
import textwrap

from bounded import bounded_cli, one_line_error
from clirun import ROOT, in_process

from alloctune.diagnosis import diagnose
from alloctune.diagnosis.message import parse_message

PUBLIC = ROOT / "tests" / "fixtures" / "oom" / "public"
PACKED = ROOT / "workloads" / "transformer-packed.yaml"


def test_a_torch_2_0_message_gets_advice_that_torch_has():
    """expandable_segments came with torch 2.1: a message in 1.x-2.0's layout is told what it can use."""
    for name in ("v1early-cached.txt",):   # fragmentation, in the early 1.x layout
        d = diagnose(PUBLIC / name)
        assert d.verdict is not None and d.verdict.cause == "fragmentation"
        steps = " ".join(d.next_steps)
        assert "expandable_segments:True" not in steps and "max_split_size_mb:512" in steps
        assert "has no expandable_segments" in steps
    newer = diagnose(PUBLIC / "v2_2-wrapped-frag.txt")   # the same cause from torch 2.2 keeps its advice
    assert newer.verdict is not None and "expandable_segments:True" in newer.next_steps[0]


def test_other_processes_are_not_claimed_where_the_message_cannot_tell():
    for name in ("v1-windows-crlf.txt", "v1early-cached.txt"):   # 1.x layouts list no processes
        d = diagnose(PUBLIC / name)
        assert d.verdict is not None and d.verdict.numbers["other_processes"] is None, name
        assert any("the memory other processes held is not known" in n for n in d.verdict.notes), name
        run = in_process("diagnose", PUBLIC / name)
        assert run.returncode == 0 and "other processes 0 B" not in run.stdout, run.stdout

def test_a_message_that_lists_processes_says_none_when_it_lists_none_but_this_one(tmp_path):
    """torch 2.1+ lists every process NVML sees: naming only this one, the card's total less its free memory and
    this process's is nobody else's."""
    path = tmp_path / "oom.txt"
    path.write_text((PUBLIC / "v2_2-wrapped-frag.txt").read_text().replace("1.91 GiB is free", "20.84 GiB is free"))
    d = diagnose(path)
    assert d.verdict is not None and d.verdict.numbers["other_processes"] == 0
    assert not any("not known" in n for n in d.verdict.notes)


def _one_line(name: str) -> str:
    text = (PUBLIC / name).read_text()
    line = next(line for line in text.splitlines() if "CUDA out of memory" in line)
    return line[line.index("CUDA out of memory"):]


def test_logs_wrapped_and_prefixed_on_every_line_are_read(tmp_path):
    line = _one_line("v2_x-rank-prefix.txt")
    whole = parse_message(line)
    broken = {
        "word-wrapped, each line prefixed": "\n".join(f"[rank4]: {part}" for part in textwrap.wrap(line, 70)),
        "hard-wrapped mid-word": "\n".join(line[i:i + 61] for i in range(0, len(line), 61)),
        "hard-wrapped and prefixed": "\n".join(f"[default4]:{line[i:i + 53]}" for i in range(0, len(line), 53)),
    }
    assert re.search(r"\w\n\w", broken["hard-wrapped mid-word"])   # a word is cut somewhere
    for how, text in broken.items():
        path = tmp_path / "log.txt"
        path.write_text("epoch 3 ...\n" + text + "\n")
        run = in_process("diagnose", path, "--json")
        assert run.returncode == 0, (how, run.stderr)
        message = json.loads(run.stdout)["message"]
        assert (message["requested_bytes"], message["device_total_bytes"], message["allocated_bytes"]) == (
            whole.requested, whole.device_total, whole.allocated), how


def test_a_log_broken_in_a_way_not_read_is_told_to_join_the_lines(tmp_path):
    line = _one_line("v2_x-rank-prefix.txt")
    path = tmp_path / "log.txt"
    path.write_text("\n".join(f"worker-3 | {part}" for part in textwrap.wrap(line, 50)) + "\n")
    error = one_line_error(bounded_cli("diagnose", path))
    assert "join them into the one line torch printed" in error


def test_a_simulated_sweeps_oom_trials_point_to_the_replay_that_shows_them(tmp_path):
    out = tmp_path / "run"
    swept = in_process("sweep", PACKED, "--preset", "h200", "--backend", "sim", "--budget", "8GiB", "--conf",
                "expandable_segments:True", "--out", out)
    assert swept.returncode == 0 and "OOM in the replay at trace event" in swept.stdout, swept.stderr
    error = one_line_error(bounded_cli("diagnose", out))
    assert "its OOM trials were replayed, not run" in error and "kept no message" not in error
    [command] = re.findall(r"`(alloctune replay [^`]*)`", error)
    replay = in_process(*shlex.split(command)[1:])   # the command it gives works as given
    assert replay.returncode == 0 and "expandable_segments:True" in replay.stdout, replay.stderr
    assert "budget" in replay.stdout.lower()
