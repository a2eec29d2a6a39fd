"""Inputs a new user brings that the tool had not seen: stdin for every trace, OOM messages as real logs show
them (colours, wrappers, other backends; tests/fixtures/oom/public/SOURCES.md has their origin), and snapshot
pickles as other torch versions write them. Each is read, or refused in one line with exit 2."""
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import in_process

from alloctune.diagnosis import diagnose

ROOT = Path(__file__).resolve().parents[2]

H200 = ROOT / "tests" / "fixtures" / "oom" / "h200"
PUBLIC = ROOT / "tests" / "fixtures" / "oom" / "public"


def cli(*args, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    """`alloctune ARGS` through main() in this process (what it prints is the subject), `stdin` its standard input."""
    return in_process(*args, stdin=stdin)


def _one_line_error(run) -> str:
    assert run.returncode == 2 and not run.stdout, run
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run.stderr
    return run.stderr


def test_replay_reads_a_trace_from_stdin():
    run = cli("replay", "-", "--conf", "expandable_segments:True", "--json",
              stdin=(H200 / "frag" / "oom-rank0.pickle").read_bytes())
    assert run.returncode == 0, run.stderr
    rows = {row["conf"]: row for row in json.loads(run.stdout)["results"]}
    assert rows["expandable_segments:True"]["peak_reserved_bytes"] > 0


def test_an_empty_stdin_is_named_as_such():
    for command in ("replay", "search"):
        error = _one_line_error(cli(command, "-"))
        assert "'-' is empty" in error and "alloctune-trace-" not in error
    assert "once" in _one_line_error(cli("replay", "-", "-"))
    assert "'-' is empty" in _one_line_error(cli("diagnose", "-"))
    assert "once" in _one_line_error(cli("diagnose", "-", "-", stdin=(PUBLIC / "v2_1-shortage.txt").read_bytes()))


# Real messages (SOURCES.md), as logs and terminals leave them: file, layout, cause, figures
LOGGED = [
    ("v2_2-rich-ansi.txt", "torch 2.2+", "fragmentation", {"requested": 22 * 2**20, "gpu": 0}),
    ("v1-windows-crlf.txt", "torch 1.x-2.0", "shortage", {"requested": 132 * 2**20, "device_free": 0}),
    ("v2_x-rank-prefix.txt", "torch 2.2+", "fragmentation", {"gpu": 4, "requested": 64 * 2**20}),
    ("v2_1-no-this-process.txt", "torch 2.1", "fragmentation", {"this_process": None, "processes": ()}),
    ("async-unlimited.txt", "backend:cudaMallocAsync", "shortage", {"allowed": None, "device_free": 0}),
]


def test_real_messages_as_logs_leave_them_are_read():
    for name, layout, cause, figures in LOGGED:
        d = diagnose(PUBLIC / name)
        assert d.message is not None and d.message.format.startswith(layout), name
        assert d.verdict is not None and d.verdict.cause == cause, name
        for key, value in figures.items():
            assert getattr(d.message, key) == value, (name, key)


def test_without_a_memory_fraction_cudamallocasync_has_no_budget():
    """It prints the largest 64-bit size as its limit then; that is no budget, and no note says there is one."""
    run = cli("diagnose", PUBLIC / "async-unlimited.txt", "--json")
    assert run.returncode == 0, run.stderr
    verdict = json.loads(run.stdout)["verdict"]
    assert verdict["numbers"]["allowed"] is None
    assert not any("budget" in note for note in verdict["notes"])


def test_a_driver_out_of_memory_error_is_named_not_called_no_message():
    error = _one_line_error(cli("diagnose", "-", stdin=(PUBLIC / "driver-cuda-error.txt").read_bytes()))
    assert "'CUDA error: out of memory'" in error and "no figures" in error and "holds no" not in error
    error = _one_line_error(cli("diagnose", PUBLIC / "v0_3-thc.txt"))
    assert "'cuda runtime error (2) : out of memory'" in error and "no figures" in error


def test_diagnose_output_fits_100_columns():
    for source in (PUBLIC / "v2_1-pid-frag.txt", H200 / "frag-window" / "oom-rank0.pickle"):
        run = cli("diagnose", source)
        assert run.returncode == 0 and "warning:" in run.stdout, run.stderr
        assert max(map(len, run.stdout.splitlines())) <= 100, run.stdout


def _as_torch_2_0(snapshot: dict) -> dict:
    """The snapshot as torch 2.0 wrote it (`THCPModule_memorySnapshot` in torch/csrc/cuda/Module.cpp then; torch's
    own `_memory_viz._block_extra_legacy` still reads it): blocks without `address`, `requested_size` or `frames`
    but with a `history` of {addr, real_size}; no `segment_pool_id`, `is_expandable` or `allocator_settings`;
    trace entries without `time_us`."""
    old = {k: v for k, v in snapshot.items() if k not in ("allocator_settings", "external_annotations")}
    old["segments"] = [
        {**{k: v for k, v in s.items() if k not in ("requested_size", "is_expandable", "segment_pool_id", "frames")},
         "blocks": [{"size": b["size"], "state": b["state"].replace("awaiting", "pending"),
                     **({"history": [{"addr": b["address"], "real_size": b["requested_size"]}]}
                        if b["state"] != "inactive" else {})} for b in s["blocks"]]}
        for s in snapshot["segments"]]
    old["device_traces"] = [[{k: v for k, v in e.items() if k in ("action", "addr", "size", "stream", "device_free")}
                             for e in trace] for trace in snapshot["device_traces"]]
    return old


def test_a_torch_2_0_snapshot_is_diagnosed_as_its_2_11_original(tmp_path):
    """A trace that starts mid-run is completed from the blocks' addresses, which 2.0 did not write."""
    original = H200 / "frag-window" / "oom-rank0.pickle"
    legacy = tmp_path / "oom-rank0.pickle"
    legacy.write_bytes(pickle.dumps(_as_torch_2_0(pickle.loads(original.read_bytes()))))
    assert "address" not in pickle.loads(legacy.read_bytes())["segments"][0]["blocks"][0]
    new, old = diagnose(original), diagnose(legacy)
    assert old.replay is not None and new.replay is not None and not new.replay.reconstruction.whole_run
    assert old.replay.to_json() == new.replay.to_json()
    assert old.recommended_conf == new.recommended_conf == "expandable_segments:True"


def test_a_shortage_at_the_limit_does_not_contradict_its_figures():
    """Live tensors plus the request fit what the process could have (by the rounded figures), and the free memory
    covers the request: the reasons must not say 'more than', nor the next step ask for 0 B fewer."""
    d = diagnose(PUBLIC / "v2_1-at-the-limit.txt")
    assert d.verdict is not None and d.verdict.cause == "shortage" and not d.verdict.sure
    assert "more than" not in d.verdict.reasons[0] and "within" in d.verdict.reasons[0]
    assert not any("0 B" in step for step in d.verdict.next_steps)


def test_the_maximum_over_ranks_keeps_setting_names_whole_and_says_a_notice_once():
    long = "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"
    run = cli("replay", H200 / "frag" / "oom-rank0.pickle", H200 / "budget" / "oom-rank0.pickle",
              "--conf", long, "--conf", "expandable_segments:True")
    assert run.returncode == 0, run.stderr
    maximum = run.stdout[run.stdout.index("Maximum over the 2 traces"):]
    assert shown(long, maximum) and "expandable_segments:True" in maximum
    assert max(map(len, run.stdout.splitlines())) <= 100
    assert run.stderr.count("notice:") <= 1
    longer = "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,1024:4,>:8],max_non_split_rounding_mb:64"
    run = cli("replay", H200 / "frag" / "oom-rank0.pickle", H200 / "budget" / "oom-rank0.pickle", "--conf", longer)
    maximum = run.stdout[run.stdout.index("Maximum over the 2 traces"):]
    assert run.returncode == 0 and shown(longer, maximum), run.stdout


def shown(setting: str, text: str) -> bool:
    """`setting` given whole in `text`: on one line, or folded after its commas onto the lines that follow
    (report/tables.fold), each continuation the first word of its line."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        for word in line.split():
            joined, j = word, i + 1
            while joined != setting and joined.endswith(",") and j < len(lines) and lines[j].split() \
                    and setting.startswith(joined + lines[j].split()[0]):
                joined, j = joined + lines[j].split()[0], j + 1
            if joined == setting:
                return True
    return False


def test_bad_choices_on_a_real_snapshot_are_one_line_not_a_made_up_answer():
    snapshot = H200 / "frag" / "oom-rank0.pickle"   # one GPU: device 0
    assert "nothing on device 3" in _one_line_error(cli("diagnose", snapshot, "--device", "3"))
    assert "bogus" in _one_line_error(cli("diagnose", snapshot, "--conf", "bogus:1"))
    for command in ("replay", "search"):
        assert "above 0" in _one_line_error(cli(command, snapshot, "--device-memory", "0"))


def test_a_python_that_is_not_one_is_said_plainly():
    error = _one_line_error(cli("search", H200 / "frag" / "oom-rank0.pickle", "--python", "/bin/true"))
    assert "is it a Python interpreter?" in error


def test_the_api_takes_one_setting_as_a_string():
    import alloctune

    trace = alloctune.load_trace(H200 / "frag" / "oom-rank0.pickle")
    one = alloctune.replay(trace, "expandable_segments:True", device_memory=24 * 2**30, jobs=1).outcomes
    assert {o.conf for o in one} == {"default", "expandable_segments:True"}   # the default: always, the baseline
    assert all(o.result is not None for o in one)


def test_replay_reads_its_grid_from_stdin_once_for_every_trace():
    run = cli("replay", H200 / "frag" / "oom-rank0.pickle", H200 / "budget" / "oom-rank0.pickle", "--grid", "-",
              "--json", stdin=b"expandable_segments:True\nmax_split_size_mb:512\n")
    assert run.returncode == 0, run.stderr
    for trace in json.loads(run.stdout)["traces"]:
        assert {row["conf"] for row in trace["results"]} == {"default", "expandable_segments:True",
                                                             "max_split_size_mb:512"}
    assert "once" in _one_line_error(cli("replay", "-", "--grid", "-"))


def two_gpus(tmp_path) -> Path:
    snapshot = pickle.loads((H200 / "frag" / "oom-rank0.pickle").read_bytes())
    snapshot["device_traces"] *= 2    # the same run on GPUs 0 and 1
    snapshot["segments"] += [{**s, "device": 1} for s in snapshot["segments"]]
    path = tmp_path / "two.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    return path


@pytest.mark.parametrize("args", [["replay", "{}"], ["search", "{}", "--max-settings", "5"], ["fleet", "{}"],
                                  ["fit", "--param", "b", "--trace", "1={}", "--trace", "2={copy}"],
                                  ["sweep", ROOT / "workloads" / "detection.yaml", "--preset", "h200", "--backend",
                                   "sim", "--trace", "{}"]])
def test_a_snapshot_of_two_gpus_names_an_option_the_command_has(tmp_path, args):
    """Every command that loads a trace says how to choose a device in its own words: the flag it has (every one
    but sweep has --device), else what to do instead; nothing is written."""
    path = two_gpus(tmp_path)
    copy = tmp_path / "copy.pickle"   # fit takes a trace at each value, each a file of its own
    if any("{copy}" in str(a) for a in args):
        copy.write_bytes(path.read_bytes())
    given = [str(a).replace("{copy}", str(copy)).replace("{}", str(path)) for a in args]
    line = _one_line_error(in_process(*given, "--results" if args[0] == "sweep" else "--jobs", tmp_path / "r"
                                      if args[0] == "sweep" else "1", cwd=tmp_path))
    assert "devices [0, 1]" in line, line
    flags = re.findall(r"(?<![\w-])--[a-z-]+", re.sub(r"`[^`]*`", "", line))   # its own: not another command's
    usage = in_process(args[0], "--help").stdout
    assert all(flag in usage for flag in flags) and ("choose one with --device N" in line) == (args[0] != "sweep")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"two.pickle", *([copy.name] if copy.exists() else [])})
    if args[0] != "sweep":
        fewer = ["--max-settings", "5"] if args[0] == "search" else ["--conf", "expandable_segments:True"]
        run = in_process(*given, "--device", "1", *fewer, "--json", cwd=tmp_path)
        assert run.returncode == 0, run.stderr


def test_the_python_api_names_its_keyword(tmp_path):
    import alloctune

    with pytest.raises(alloctune.AlloctuneError, match=r"choose one with device=N$"):
        alloctune.fleet([two_gpus(tmp_path)])


@pytest.mark.slow
def test_search_never_breaks_a_setting_name():
    """In a 70-column terminal the front's two-key setting does not fit beside the figures: it stands whole on its
    numbered line instead of being folded inside the table (in 100 columns it fits in the table)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "70"}
    run = subprocess.run([sys.executable, "-m", "alloctune", "search", ROOT / "workloads" / "traces" /
                          "transformer-packed-h200.xz", "--max-settings", "60"], capture_output=True, text=True,
                         cwd=ROOT, timeout=600, env=env)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert max(map(len, lines)) <= 70
    whole = [m.group(1) for line in lines if (m := re.fullmatch(r"  \d+\. (\S+)", line))]
    assert "default" in whole and any("," in setting for setting in whole), run.stdout


def test_a_log_that_windows_powershell_redirected_is_read(tmp_path):
    """Windows PowerShell 5.1 writes `python train.py 2> log.txt` as UTF-16 with a byte-order mark."""
    log = tmp_path / "log.txt"
    log.write_bytes((PUBLIC / "v1-windows-crlf.txt").read_text(encoding="utf-8").encode("utf-16"))
    assert log.read_bytes()[:2] == b"\xff\xfe"
    d = diagnose(log)
    assert d.message is not None and d.message.requested == 132 * 2**20
    run = cli("diagnose", "-", "--json", stdin=log.read_bytes())
    assert run.returncode == 0 and json.loads(run.stdout)["cause"] == d.verdict.cause, run.stderr


def test_the_dump_on_oom_folder_points_to_its_snapshots():
    error = _one_line_error(cli("diagnose", H200 / "frag"))
    assert "dump_on_oom" in error and str(H200 / "frag" / "oom-rank0.pickle") in error


def _own_snapshot(tmp_path) -> Path:
    """A real OOM snapshot as torch.cuda.memory._dump_snapshot writes it: no torch version, no device memory."""
    snapshot = pickle.loads((H200 / "frag" / "oom-rank0.pickle").read_bytes())
    del snapshot["alloctune"]
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    return path


def test_replaying_a_users_own_snapshot_says_which_torch_it_assumes(tmp_path):
    path = _own_snapshot(tmp_path)
    run = cli("replay", path, "--conf", "expandable_segments:True")
    assert run.returncode == 0 and "does not say which torch recorded it" in run.stdout, run.stderr
    run = cli("replay", H200 / "frag" / "oom-rank0.pickle", "--conf", "expandable_segments:True")
    assert run.returncode == 0 and "does not say which torch" not in run.stdout, run.stderr


@pytest.mark.slow
def test_the_json_carries_the_warnings_the_text_prints(tmp_path):
    """What a replay rests on (frees of blocks from before the recording, an assumed torch or card) is said by
    --json as by the text: the same `warnings` list in replay, search and diagnose."""
    own = _own_snapshot(tmp_path)
    torch_assumed, card_assumed = "does not say which torch", "does not say how much memory its GPU had"
    for args, said in [
            (("replay", H200 / "frag-window" / "oom-rank0.pickle"), ["the state at its start was rebuilt"]),
            (("replay", own), [torch_assumed, card_assumed]),
            (("search", own, "--max-settings", "8"), [torch_assumed, card_assumed]),   # as replay (sim/target.py)
            (("diagnose", own), [torch_assumed])]:                      # the message says the card
        text, data = in_process(*args), in_process(*args, "--json")   # what they print: main() in this process
        assert text.returncode == data.returncode == 0, (text.stderr, data.stderr)
        warnings = json.loads(data.stdout)["warnings"]
        assert all(any(part in w for w in warnings) for part in said), (args, warnings)
        printed = " ".join(text.stdout.split())   # the text wraps them at 100 columns
        assert all(f"warning: {' '.join(w.split())}" in printed for w in warnings), (args, text.stdout)


def test_replay_keeps_its_figures_when_settings_are_too_long_for_the_table():
    """Two settings that cannot stand beside the figures in 100 columns: the table refers to them as (1), (2), ...
    and keeps every figure column; each setting is printed whole below it."""
    long = ["expandable_segments:True,roundup_power2_divisions:[1:1,16:16,256:16,512:16]",
            "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,1024:4,>:8],max_non_split_rounding_mb:64"]
    run = cli("replay", H200 / "frag" / "oom-rank0.pickle", "--conf", long[0], "--conf", long[1], "--min-memory")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert all(any(line.endswith(f") {setting}") for line in lines) for setting in long), run.stdout
    assert any("peak" in line and "fits" in line for line in lines), run.stdout   # the figures' headers
    assert max(len(line) for line in lines if not line.startswith("  (")) <= 100


def test_a_dump_whose_first_allocation_failed_is_still_diagnosed(tmp_path):
    """Nothing on the device yet (no segment, no trace entry): the figures dump_on_oom's observer kept suffice."""
    snapshot = pickle.loads((H200 / "frag" / "oom-rank0.pickle").read_bytes())
    snapshot["segments"], snapshot["device_traces"] = [], [[]]
    snapshot["alloctune"]["oom"].update(requested_bytes=16 * 2**30, device_free_bytes=2**30)
    path = tmp_path / "oom-rank0.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    d = diagnose(path)
    assert d.facts is not None and d.facts.requested == 16 * 2**30 and d.verdict is not None
