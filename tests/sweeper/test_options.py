"""`SweepOptions`: every check in one place, errors that name the field (and, from the CLI, the flag), and
`sweep()` built from keyword arguments as before. The sweeps here stop before anything runs: a stand-in
interpreter answers the probe as a machine with or without a GPU, so no test depends on this machine's."""
from __future__ import annotations

import json
import stat
import sys
import textwrap
from dataclasses import fields

import pytest
from clirun import ROOT, cli

import alloctune
from alloctune.cli.args import flagged
from alloctune.cli.main import build_parser
from alloctune.cli.sweep import FLAGS
from alloctune.errors import OptionError, OptionText, SizeError
from alloctune.results.records import Backend
from alloctune.sweeper.options import ExecutorKind, SweepCallbacks, SweepOptions

VARLEN = ROOT / "workloads" / "transformer-varlen.yaml"


@pytest.mark.parametrize("given, field, message", [
    (dict(repeats=0), "repeats", "repeats must be 'confirm', 'auto' or a whole number from 1 to 1000, got 0"),
    (dict(repeats="5"), "repeats", "repeats must be 'confirm', 'auto' or a whole number from 1 to 1000, got '5'"),
    (dict(max_repeats=1), "max_repeats", "max_repeats must be a whole number from 3 to 1000, got 1"),
    (dict(time_budget_s=0), "time_budget_s", "time_budget_s must be a positive, finite number of seconds, got 0"),
    (dict(time_budget_s=float("inf")), "time_budget_s",   # it said only 'must be positive' of inf
     "time_budget_s must be a positive, finite number of seconds, got inf"),
    (dict(max_slowdown=1.0), "max_slowdown", "max_slowdown must be a fraction in [0, 1) such as 0.02, got 1.0"),
    (dict(timeout_s=float("inf")), "timeout_s", "timeout_s must be a positive number of seconds, at most 604800, "
                                                "got inf"),
    (dict(search=0, backend="sim"), "search", "search must be a whole number from 1 to 2**63 - 1, got 0"),
    (dict(finalists=0), "finalists", "finalists must be a whole number from 1 to 2**63 - 1, got 0"),
    (dict(check_growth=0), "check_growth", "check_growth must be a whole number from 1 to 2**63 - 1, got 0"),
    (dict(gpus=[0, 0]), "gpus", "gpus must be distinct GPU indices >= 0, got (0, 0)"),
    (dict(backend="gpu"), "backend", "backend expects auto, cuda, sim or hybrid, got 'gpu'"),
    (dict(executor="slurm"), "executor", "executor expects local or ray, got 'slurm'"),
    (dict(search=5, backend="cuda"), "search", "search replays a trace: use it with backend sim or hybrid"),
    (dict(ray_accelerator="H100"), "ray_accelerator", "ray_address and ray_accelerator go with executor ray"),
    (dict(gpus=[0, 1, 2], gpus_per_trial=2), "gpus_per_trial",
     "gpus_per_trial 2: expected a positive divisor of the number of gpus (3)"),
    (dict(executor="ray", backend="sim"), "executor",
     "executor ray runs measured trials; backend sim replays here, without a cluster"),
    (dict(executor="ray", gpus=[0]), "gpus",
     "gpus picks GPUs of this machine; with executor ray, Ray assigns each trial its GPUs"),
    (dict(executor="ray", gpus_per_trial=0), "gpus_per_trial", "gpus_per_trial 0: expected at least 1"),
])
def test_each_bad_option_is_one_error_naming_its_field(given, field, message):
    with pytest.raises(OptionError) as caught:
        SweepOptions(**given)
    assert caught.value.field == field and str(caught.value) == message


def test_the_cli_names_the_flag_instead():
    with pytest.raises(OptionError) as caught:
        SweepOptions(repeats="auto", max_repeats=1)
    assert flagged(caught.value, FLAGS) == "--max-repeats must be a whole number from 3 to 1000, got 1"
    with pytest.raises(OptionError) as caught:
        SweepOptions(repeats=2, max_repeats=1, time_budget_s=-1.0)   # fixed repeats: no cap on rounds to check
    assert flagged(caught.value, FLAGS) == "--time-budget must be a positive, finite number of seconds, got -1.0"


def test_options_are_held_as_given_types_and_tuples():
    options = SweepOptions(backend="sim", executor="local", gpus=[1, 0], grid=["expandable_segments:True"],
                           pythons="python3", budget="0.5", repeats=3)
    assert options.backend is Backend.SIM and options.executor is ExecutorKind.LOCAL
    assert options.gpus == (1, 0) and options.grid == ("expandable_segments:True",) and options.pythons == ("python3",)
    assert options.budget_limit == (None, 0.5) and options.rounds == 3 and not options.auto
    assert SweepOptions().rounds == 10 and SweepOptions().auto
    with pytest.raises(SizeError, match="a budget is a size such as '24GiB' or a fraction"):
        SweepOptions(budget="2")


def test_every_option_but_the_recorded_command_line_is_a_flag_whose_dest_is_the_field():
    sweep_parser = next(a for a in build_parser()._actions if a.dest == "command").choices["sweep"]
    dests = {s: a.dest for a in sweep_parser._actions for s in a.option_strings}
    assert {f.name for f in fields(SweepOptions)} - set(FLAGS) == {"started_as"}
    assert all(dests[flag] == field for field, flag in FLAGS.items()), {f: dests.get(g) for f, g in FLAGS.items()}
    # the CLI's defaults and choices are the library's
    defaults = sweep_parser.parse_args([])
    names = {f.name for f in fields(SweepOptions)} - {"started_as"}
    assert SweepOptions(**{name: getattr(defaults, name) for name in names}) == SweepOptions()
    choices = {a.dest: a.choices for a in sweep_parser._actions if a.choices}
    assert list(choices["backend"]) == [b.value for b in Backend]
    assert list(choices["executor"]) == [k.value for k in ExecutorKind]


def test_option_text_values_are_never_placeholders():
    text = OptionText("{path} is busy; use {fresh=True} or another {out} ({took:.1f} s, {name!r})",
                      path="/tmp/{out}", took=1.25, name="a}b")
    assert text == "/tmp/{out} is busy; use fresh=True or another out (1.2 s, 'a}b')"
    assert flagged(text, {"fresh": "--fresh", "out": "--out"}) == \
        "/tmp/{out} is busy; use --fresh or another --out (1.2 s, 'a}b')"
    assert flagged(OptionText("use {backend=sim}"), {"backend": "--backend"}) == "use --backend sim"
    assert flagged("plain {text}", FLAGS) == "plain {text}"


def test_sweep_refuses_an_unknown_keyword_before_anything_runs(tmp_path):
    with pytest.raises(OptionError, match=r"sweep\(\) has no option 'max_repeat'; its options: .*max_repeats,") as e:
        alloctune.sweep(VARLEN, preset="h200", max_repeat=5, results_root=tmp_path)
    assert e.value.field == "max_repeat" and not any(tmp_path.iterdir())


def standin(tmp_path, gpus: int):
    """An interpreter that answers alloctune's probe as a machine with `gpus` GPUs (and runs nothing else)."""
    python = tmp_path / f"python-{gpus}-gpus"
    probed = dict(python=str(python), python_version="3", torch_version="2.13.0", torch_git=None, cuda_version="12",
                  cuda_available=gpus > 0, device_count=gpus, driver="1", host="h", env_id="torch-2.13.0",
                  devices=[dict(index=i, name="fake", total_memory=2**34) for i in range(gpus)])
    python.write_text("#!" + sys.executable + "\n" + textwrap.dedent(f"""
        import sys
        assert sys.argv[1:4] == ["-m", "alloctune.child.probe", "probe"], sys.argv
        sys.stdin.read()
        print("ALLOCTUNE-PROBE " + {json.dumps(probed)!r})
    """))
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return str(python)


def test_an_options_object_and_callbacks_with_what_the_probe_saw(tmp_path):
    phases = []
    options = alloctune.SweepOptions(preset="h200", backend=Backend.CUDA, pythons=[standin(tmp_path, 0)],
                           results_root=tmp_path / "results")
    with pytest.raises(OptionError, match="^backend cuda needs a CUDA GPU, but none is visible to .*; use backend "
                                          "sim$") as caught:
        alloctune.sweep(VARLEN, options, callbacks=SweepCallbacks(phase=lambda name, count: phases.append(name)))
    assert caught.value.field == "backend" and phases == ["probing 1 Python interpreter"]
    # keyword arguments win over the object's fields
    with pytest.raises(OptionError, match="^gpus 1: only 1 GPU\\(s\\) visible$"):
        alloctune.sweep(VARLEN, options, pythons=[standin(tmp_path, 1)], gpus=[1])
    assert not (tmp_path / "results").exists()


def test_the_cli_shows_flags_for_what_the_library_names_by_field(tmp_path):
    python = standin(tmp_path, 1)
    proc = cli("sweep", VARLEN, "--preset", "h200", "--python", python, "--backend", "cuda", "--gpus", "0,1",
               "--results", tmp_path / "r")
    assert proc.returncode == 2 and proc.stderr.strip() == "alloctune: error: --gpus 1: only 1 GPU(s) visible"
    proc = cli("sweep", "--metric-regex", "([", "--", sys.executable, "-c", "pass")
    assert proc.returncode == 2 and proc.stderr.startswith("alloctune: error: --metric-regex '([': ")


def test_the_growth_check_is_for_a_command_and_reaches_its_trials(tmp_path):
    proc = cli("sweep", VARLEN, "--preset", "h200", "--check-growth", "50", "--results", tmp_path / "r")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "alloctune: error: --check-growth samples the memory of a command's own steps (the start-up hook counts "
        "them): sweep it as -- COMMAND ...")
    # a command's measured trials carry it to the hook (trial/command.py)
    from types import SimpleNamespace

    from alloctune.settings.conf import AllocConf
    from alloctune.sweeper.sweep import _measured
    from alloctune.workload.command import check_command, command_workload

    spec = command_workload(check_command([sys.executable, "-c", "pass"], None, None, None, False))
    probe = SimpleNamespace(python=sys.executable, env_id="torch-2.13.0")
    assert _measured(spec, SweepOptions(check_growth=50), AllocConf(), 0, probe).check_growth == 50
    assert _measured(spec, SweepOptions(), AllocConf(), 0, probe).check_growth is None
