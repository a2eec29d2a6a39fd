"""`diagnose` and `replay` give one answer for one OOM snapshot: for every OOM snapshot among the fixtures, the
settings diagnose's table says would (not) have fitted are those `alloctune replay` finds fitting (or running out)
under the run's own budget, at the same peaks, and diagnose's suggested `alloctune replay` command, run as printed,
shows what diagnose said: the recorded setting runs out, the recommended one fits."""
import json
import re
import shlex
from pathlib import Path

import pytest
from bounded import bounded_cli

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOTS = sorted((ROOT / "tests" / "fixtures" / "oom").rglob("*.pickle"))

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
    allowed = diagnosis["snapshot"]["oom"]["allowed"]
    confs = [arg for conf in said for arg in ("--conf", conf)]
    replayed = cli_json("replay", snapshot.relative_to(ROOT), *confs,
                        *(("--budget", str(allowed)) if allowed else ()))
    assert verdicts(replayed["results"]) == said


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
