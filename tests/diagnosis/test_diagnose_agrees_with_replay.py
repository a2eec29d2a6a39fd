"""`diagnose` and `replay` give one answer for one OOM snapshot: for every OOM snapshot among the fixtures, the
settings diagnose's table says would (not) have fitted are those a plain `alloctune replay SNAPSHOT` finds fitting
(or running out), at the same peaks: it replays the failed request, under the memory the snapshot says the process
could have, as diagnose judges it; and diagnose's suggested `alloctune replay` command, run as printed, shows what
diagnose said: the recorded setting runs out, the recommended one fits."""
import json
import pickle
import re
import shlex
from pathlib import Path

import pytest
from bounded import bounded_cli, one_line_error
from snapshots import read_snapshot

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOTS = sorted((ROOT / "tests" / "fixtures" / "oom").rglob("*.pickle"))
SNAPSHOTS_DIR = ROOT / "tests" / "fixtures" / "oom" / "h200"

pytestmark = pytest.mark.slow


def cli_json(*args) -> dict:
    run = bounded_cli(*args, "--json", timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def verdicts(outcomes: list[dict]) -> dict[str, tuple[bool, int]]:
    """Per simulated setting: whether it fitted (no OOM), and its peak reserved."""
    return {o["conf"]: (o["num_ooms"] == 0, o["peak_reserved_bytes"]) for o in outcomes if "num_ooms" in o}


def test_the_fixtures_hold_oom_snapshots():
    assert len(SNAPSHOTS) >= 6
    assert any("window" in p.parent.name for p in SNAPSHOTS)   # one whose trace starts mid-run


@pytest.mark.parametrize("snapshot", SNAPSHOTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_diagnose_and_replay_agree_on_every_setting(snapshot):
    diagnosis = cli_json("diagnose", snapshot.relative_to(ROOT))
    window = diagnosis["replay"]
    assert window is not None and window["reproduced"] is True
    said = verdicts(window["outcomes"])
    assert said[window["recorded_conf"]][0] is False   # the run's own setting ran out, as on the GPU
    replayed = cli_json("replay", snapshot.relative_to(ROOT))   # no option: the snapshot's own conditions
    assert verdicts(replayed["results"]) == said
    assert any("the request that failed" in w for w in replayed["warnings"])


def test_a_plain_replay_says_it_runs_under_what_the_snapshot_allowed_and_an_option_still_wins(tmp_path):
    """A snapshot whose observer kept a memory fraction's limit (changed here to 3.5 GiB, under which the 4 GiB
    segments the run held cannot be had): replayed under it, a warning says where the budget came from, and fleet,
    which replays through the same limits, agrees; --budget or --device-memory given, the snapshot's limit is not
    applied."""
    snapshot = read_snapshot(SNAPSHOTS_DIR / "frag" / "oom-rank0.pickle")
    snapshot["alloctune"]["oom"]["allowed_bytes"] = 3584 * 2**20
    path = tmp_path / "oom-rank0.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    plain = bounded_cli("replay", path, "--conf", "default", timeout=120)
    assert plain.returncode == 0, plain.stderr
    assert ("replayed under a budget of 3.50 GiB, what the snapshot says the process could have"
            in " ".join(plain.stdout.split()))
    assert verdicts(cli_json("replay", path, "--conf", "default")["results"])["default"][0] is False
    for option in (("--budget", "8GiB"), ("--device-memory", "140GiB")):
        run = bounded_cli("replay", path, "--conf", "default", *option, timeout=120)
        assert run.returncode == 0 and "what the snapshot says" not in run.stdout, run.stderr
        assert verdicts(cli_json("replay", path, "--conf", "default", *option)["results"])["default"][0] is True
    snapshot["alloctune"]["oom"]["allowed_bytes"] = "3.5GiB"   # no byte count: refused in one line, as diagnose does
    path.write_bytes(pickle.dumps(snapshot))
    assert "field 'oom.allowed_bytes'" in one_line_error(bounded_cli("replay", path))


@pytest.mark.parametrize("snapshot", SNAPSHOTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_suggested_replay_run_as_printed_confirms_the_diagnosis(snapshot):
    diagnosis = cli_json("diagnose", snapshot.relative_to(ROOT))
    said = verdicts(diagnosis["replay"]["outcomes"])
    commands = [c for step in diagnosis["next_steps"] for c in re.findall(r"`(alloctune replay [^`]*)`", step)
                if "TRACE" not in c and "SNAPSHOT" not in c]
    if not commands:
        pytest.skip("diagnose suggests no replay of this snapshot")
    for command in commands:
        replayed = verdicts(cli_json(*shlex.split(command)[1:])["results"])
        assert replayed[diagnosis["replay"]["recorded_conf"]][0] is False
        if diagnosis["recommended_conf"] in replayed:
            assert replayed[diagnosis["recommended_conf"]][0] is True
        assert all(replayed[conf] == said[conf] for conf in replayed if conf in said)
