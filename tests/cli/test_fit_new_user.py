"""`alloctune fit` as a new user met it (on synthetic traces of one job at several values, tests/scaled.py, and the
committed dry runs of results/h100-dryrun-2026-12-06): its tables fit 80 columns whatever the values, --json keeps
them all; traces of different commands, and a curve that falls as the value grows, are warned of and nothing is
extrapolated from the fall; a named setting the grid's rules skip is said as replay says it; and --json names the
figures as the Python API does, where the context came from, and no margin where nothing tested the curve."""
from __future__ import annotations

import json

from clirun import ROOT, in_process
from scaled import scaled_trace, write_traces

import alloctune
from alloctune.sim.trace import save_trace
from alloctune.units import MiB

CONFS = ["default", "expandable_segments:True", "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"]
DRY = ROOT / "results" / "h100-dryrun-2026-12-06" / "dry"


def fit(*args, confs=CONFS, env=None):
    done = in_process("fit", "--param", "batch", *[a for c in confs for a in ("--conf", c)], "--jobs", "1", *args,
                      env=env)
    assert done.returncode == 0, done.stderr
    return done


def test_eleven_values_fit_80_columns_and_say_which_they_left_out_while_json_keeps_them_all(tmp_path):
    """With 11 values the curves table took 169 columns and the budget's 143, COLUMNS=80 or not."""
    values = [8 * 2**i for i in range(11)]
    traces = write_traces(tmp_path, values, per_unit=MiB // 64)
    lines = fit(*traces, "--budget", "0.5", env={"COLUMNS": "80"}).stdout.splitlines()
    assert max(map(len, lines)) <= 80, "\n".join(line for line in lines if len(line) > 80)
    text = " ".join(lines)
    words = " ".join(text.split())
    assert words.count("left out to fit the width: --json gives every value") == 2   # the curves, the budget's
    assert "batch batch" in words and "batch 16," in words   # the first values shown; the second among those left
    assert "at 8/" in words and "/8192 " in words             # copies at once at the first and the last value
    printed = json.loads(fit(*traces, "--budget", "0.5", "--json").stdout)
    assert printed["values"] == values and all(len(s["points"]) == 11 for s in printed["settings"])
    assert all(len(a["copies"]) == 11 for a in printed["limits"][0]["answers"])


def test_traces_of_different_commands_and_a_falling_curve_are_warned_of_and_nothing_is_extrapolated(tmp_path):
    """Traces of two scripts: memory fell from 2.78 to 2.15 GiB as the batch doubled, and fit answered '32+
    extrapolated'."""
    big, small = scaled_trace(8, per_unit=16 * MiB), scaled_trace(16, per_unit=MiB)
    big.meta["command"], small.meta["command"] = ["train.py", "--batch", "8"], ["other.py", "--batch", "16"]
    save_trace(big, tmp_path / "a.xz")
    save_trace(small, tmp_path / "b.xz")
    args = ["--trace", f"8={tmp_path / 'a.xz'}", "--trace", f"16={tmp_path / 'b.xz'}", "--cards", "24GiB"]
    said = json.loads(fit(*args, "--json", confs=["default"]).stdout)
    [warned_commands, warned_fall] = said["warnings"]
    assert warned_commands == ("the traces ran different commands (batch 8: 'train.py --batch 8'; batch 16: "
                               "'other.py --batch 16'): a fit joins one job's traces at several values of batch")
    assert warned_fall.startswith("the curve of default falls past batch 16 (peak reserved 2.78 GiB at 8, 2.15 GiB "
                                  "at 16): memory is taken to grow with batch, so no answer goes past 16")
    [answer] = said["limits"][0]["answers"]
    assert (answer["largest"], answer["capped"], answer["basis"], answer["curve"]) == (16, True, "replayed", None)
    text = " ".join(fit(*args, confs=["default"]).stdout.split())
    assert "warning: the traces ran different commands" in text and "warning: the curve of default falls" in text
    # the same job at each value, its value a word or in one, another word the value's digits: nothing to warn of
    for value in (8, 16):
        trace = scaled_trace(value)
        trace.meta["command"] = ["train.py", "--batch", str(value), f"--log=run-{value}.txt", "--steps", "8"]
        save_trace(trace, tmp_path / f"same-{value}.xz")
    same = ["--trace", f"8={tmp_path / 'same-8.xz'}", "--trace", f"16={tmp_path / 'same-16.xz'}"]
    assert json.loads(fit(*same, "--cards", "24GiB", "--json", confs=["default"]).stdout)["warnings"] == []


def test_a_named_setting_the_grids_rules_skip_is_said_as_replay_says_it(tmp_path):
    traces = write_traces(tmp_path, [8, 16, 32])
    skipped = "expandable_segments:True,garbage_collection_threshold:0.8"
    said = json.loads(fit(*traces, "--cards", "24GiB", "--json", confs=["default", skipped]).stdout)
    [line] = [w for w in said["warnings"] if skipped in w]
    assert [s["conf"] for s in said["settings"]] == ["default"]
    replay = in_process("replay", tmp_path / "job-8.xz", "--conf", skipped, env={"COLUMNS": "1000"})
    assert line.startswith(f"skipped {skipped}: garbage_collection_threshold does nothing") and line in replay.stdout
    text = fit(*traces, "--cards", "24GiB", confs=["default", skipped], env={"COLUMNS": "1000"}).stdout
    assert f"warning: {line}" in text


def test_json_and_the_python_api_name_each_answers_basis_alike_and_a_dry_runs_context_is_its_tables(tmp_path):
    """The API's answers said basis 'extrapolated' where --json said 'predicted'; --json said overhead_measured
    of a dry run's table; and two values gave 'margin': 2e-16 where the text said nothing tested the curve."""
    traces = {b: DRY / f"autocast-b{b}.xz" for b in (4, 8)}
    api = alloctune.fit("batch", traces=traces, confs=["default"], cards=["24GiB"], jobs=1)
    args = [a for b, path in traces.items() for a in ("--trace", f"{b}={path}")]
    printed = json.loads(fit(*args, "--cards", "24GiB", "--json", confs=["default"]).stdout)
    [answer], [row] = api.fit.limits[0].answers, printed["limits"][0]["answers"]
    assert (answer.basis, answer.curve) == (row["basis"], row["curve"]) == ("predicted", "extrapolated")
    assert (row["margin"], row["margin_why"]) == (None, "too few values for a leave-one-out: nothing tested the curve")
    assert printed["overhead_from"] == api.fit.overhead_from == "table" and "overhead_measured" not in printed
    text = " ".join(fit(*args, "--cards", "24GiB", confs=["default"], env={"COLUMNS": "200"}).stdout.split())
    assert "(the card's, from the dry run's table)" in text
    assert "extrapolated none" in text and "default: none, its line meets batch 4, 8" in text
