"""Snapshots and messages crafted to break diagnose (issue 19): each is refused in one line naming what is wrong,
with exit 2, never a traceback."""
from __future__ import annotations

import copy
import json
import math
import pickle

import pytest
from bounded import bounded_cli, one_line_error
from clirun import ROOT

SNAPSHOT = ROOT / "tests" / "fixtures" / "oom" / "h200" / "frag" / "oom-rank0.pickle"
MESSAGE = ROOT / "tests" / "fixtures" / "oom" / "public" / "v2_1-shortage.txt"


def _oom(s: dict) -> dict:
    return next(e for e in s["device_traces"][0] if e.get("action") == "oom")


# (what is changed, the field the error names)
CRAFTED = [
    (lambda s: s["device_traces"][0].append(7), "device_traces[0][97] is not a trace entry"),
    (lambda s: s["device_traces"].append(7), "device_traces[1] is not a list of trace entries"),
    (lambda s: s["segments"][0].update(device=[0]), "segments[0]: field 'device': expected an integer, got [0]"),
    (lambda s: s["segments"][0].update(device="0"), "segments[0]: field 'device': expected an integer, got '0'"),
    (lambda s: s["segments"][0].update(address=math.inf), "segments[0]: field 'address': expected an integer"),
    (lambda s: s["segments"][0].update(total_size=math.inf), "field 'total_size': expected an integer, got inf"),
    (lambda s: s["segments"][0]["blocks"][0].update(size=math.inf), "field 'blocks[0].size'"),
    (lambda s: s["device_traces"][0][3].update(addr=math.inf), "device_traces[0][3]: field 'addr'"),
    (lambda s: s["segments"][0].update(total_size="1024"), "field 'total_size': expected an integer, got '1024'"),
    (lambda s: _oom(s).update(size="1024"), "field 'size': expected an integer, got '1024'"),
    (lambda s: _oom(s).update(device_free="x"), "field 'device_free': expected an integer, got 'x'"),
    (lambda s: s.update(alloctune=[1]), "alloctune: expected a JSON object, got [1]"),
    (lambda s: s["allocator_settings"].update(max_split_size="x"), "allocator_settings: field 'max_split_size'"),
    (lambda s: s["alloctune"]["oom"]["memory_stats"].update(max_split_size="x"),
     "alloctune.oom.memory_stats: field 'max_split_size'"),
    (lambda s: s["segments"][0].update(total_size=2**80), "'total_size': expected an integer of at most 64 bits"),
    (lambda s: s["segments"][0].update(total_size=-5), "'total_size': expected a byte count from 0 to 1.15292e+18, got -5"),
    (lambda s: s["alloctune"]["oom"].update(requested_bytes="x"), "field 'oom.requested_bytes'"),
    (lambda s: s["segments"][0]["blocks"][0].update(history=[5]), "field 'blocks[0].history[0]'"),
    # figures no allocator's state has (issue 38)
    (lambda s: s["segments"][0].update(allocated_size=s["segments"][0]["total_size"] + 512), "segments[0] holds"),
    (lambda s: s["segments"][0]["blocks"][0].update(size=s["segments"][0]["total_size"] + 512), "segments[0] holds"),
    (lambda s: s["alloctune"].update(device_total_bytes=2**20),
     "figures no allocator's state has, so no cause can be read from them: "),
    (lambda s: _oom(s).update(device_free=2**50), "free on a card of"),
]


@pytest.mark.parametrize("change, said", CRAFTED)
def test_a_crafted_snapshot_is_refused_naming_the_field(tmp_path, change, said):
    snapshot = copy.deepcopy(pickle.loads(SNAPSHOT.read_bytes()))
    snapshot["alloctune"]["oom"].setdefault("memory_stats", {})
    change(snapshot)
    path = tmp_path / "oom-rank0.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    assert said in one_line_error(bounded_cli("diagnose", path))


# Entries neither diagnose nor replay reads (an action that is not a string) are skipped unread: whatever they
# hold, the answer is the original's.
UNREAD = [
    lambda s: s["device_traces"][0].insert(5, {"action": [1], "addr": 1, "size": 512}),
    lambda s: s["device_traces"][0].insert(5, {"action": {"alloc": 1}, "addr": 1, "size": 512}),
]


@pytest.mark.parametrize("change", UNREAD)
def test_an_entry_diagnose_does_not_read_is_skipped_whatever_it_holds(tmp_path, change):
    snapshot = pickle.loads(SNAPSHOT.read_bytes())
    path = tmp_path / "oom-rank0.pickle"   # the same path, without the message beside the fixture
    runs = []
    for write in (lambda: None, lambda: change(snapshot)):
        write()
        path.write_bytes(pickle.dumps(snapshot))
        runs.append(bounded_cli("diagnose", path, "--json"))
        assert runs[-1].returncode == 0, runs[-1].stderr
    original, changed = (json.loads(run.stdout) for run in runs)
    assert changed["verdict"] == original["verdict"] and changed["replay"] == original["replay"]


@pytest.mark.parametrize("addr", [math.inf, "x"])
def test_an_entry_replay_refuses_leaves_the_diagnosis_unreplayed_with_replays_reason(tmp_path, addr):
    snapshot = pickle.loads(SNAPSHOT.read_bytes())
    snapshot["device_traces"][0].insert(5, {"action": "free_requested", "addr": addr, "size": 512})
    path = tmp_path / "oom-rank0.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    refused = one_line_error(bounded_cli("replay", path))
    run = bounded_cli("diagnose", path, "--json")
    assert run.returncode == 0, run.stderr
    diagnosis = json.loads(run.stdout)
    assert diagnosis["replay"] is None and diagnosis["verdict"]
    assert any(refused.strip().removeprefix("alloctune: error: ") in w for w in diagnosis["warnings"])


def test_every_crafted_snapshot_was_diagnosed_before_its_change():
    assert bounded_cli("diagnose", SNAPSHOT).returncode == 0


@pytest.mark.parametrize("old, new, said", [
    ("32.00 GiB", "9" * 5000 + ".00 GiB", "beyond 64 bits"),
    ("32.00 GiB", "1" + "0" * 30 + " bytes", "beyond 64 bits"),
    ("GPU 0 has", "GPU " + "9" * 5000 + " has", "a GPU number of 5000 digits"),
    ("Process 2006998", "Process " + "7" * 5000, "a process id of 5000 digits"),
])
def test_an_oom_message_with_impossible_figures_is_refused(tmp_path, old, new, said):
    path = tmp_path / "oom.txt"
    path.write_text(MESSAGE.read_text().replace(old, new, 1))
    error = one_line_error(bounded_cli("diagnose", path))
    assert said in error and "torch never printed that" in error and len(error) < 300


def test_a_figure_with_thousands_of_decimals_is_read():
    """Long, but a number torch could print: read as the 3 GiB it is."""
    from alloctune.diagnosis.message import parse_message

    message = parse_message(MESSAGE.read_text().replace("32.00 GiB", "3." + "0" * 5000 + " GiB", 1))
    assert message.requested == 3 * 2**30


def test_a_message_of_another_oom_than_the_snapshots_is_refused_and_left_out_where_it_lay_beside_it(tmp_path):
    """A snapshot (a 1.46 GiB request) and a message of another OOM (4 GiB): given both, refused in one line naming
    the two requests; the same message found beside the snapshot (left from an earlier OOM, the snapshot
    overwritten by a later one) is left out, and said so."""
    other = MESSAGE.read_text()   # tried to allocate 32.00 GiB
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "oom-rank0.pickle").write_bytes(SNAPSHOT.read_bytes())
    (tmp_path / "other.txt").write_text(other)
    error = one_line_error(bounded_cli("diagnose", lone / "oom-rank0.pickle", tmp_path / "other.txt"))
    assert "the snapshot's OOM tried to allocate 1.46 GiB, the message's 32.00 GiB: two different OOMs" in error
    (lone / "oom-rank0.txt").write_text(other)
    run = bounded_cli("diagnose", lone / "oom-rank0.pickle", "--json")
    assert run.returncode == 0, run.stderr
    said = json.loads(run.stdout)
    assert said["message"] is None and said["sources"] == [str(lone / "oom-rank0.pickle")]
    assert said["verdict"]["numbers"]["requested"] == 1572864000 and said["verdict"]["cause"] == "fragmentation"
    assert any("is not this snapshot's OOM (it tried to allocate 32.00 GiB" in w for w in said["warnings"])


def test_a_message_that_names_the_segment_of_the_snapshots_small_request_is_its_own(tmp_path):
    """torch's message says the segment it asked CUDA for (20 MiB for a request of 1 to 10 MiB), the snapshot's
    trace the request (5 MiB): one OOM, read together as dump_on_oom left them."""
    snapshot = pickle.loads(SNAPSHOT.read_bytes())
    _oom(snapshot).update(size=5 * 2**20)
    snapshot["alloctune"]["oom"]["requested_bytes"] = 20 * 2**20
    (tmp_path / "oom-rank0.pickle").write_bytes(pickle.dumps(snapshot))
    message = (SNAPSHOT.parent / "oom-rank0.txt").read_text().replace("Tried to allocate 1.46 GiB",
                                                                     "Tried to allocate 20.00 MiB")
    (tmp_path / "oom-rank0.txt").write_text(message)
    for given in ((), (tmp_path / "oom-rank0.txt",)):
        run = bounded_cli("diagnose", tmp_path / "oom-rank0.pickle", *given, "--json")
        assert run.returncode == 0, run.stderr
        said = json.loads(run.stdout)
        assert said["message"]["requested_bytes"] == 20 * 2**20 and said["verdict"]["numbers"]["requested"] == 5 * 2**20
        assert not any("not this snapshot's OOM" in w for w in said["warnings"])
