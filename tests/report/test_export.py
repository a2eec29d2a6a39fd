"""export: every format read back by the consumer it is for (a real shell, python-dotenv, docker's env-file
rules, a YAML parser, a JSON parser), and every refusal."""
import json
import os
import shlex
import subprocess
import sys
from dataclasses import replace

import pytest
import yaml
from folders import choice, make_folder, new_folder, repeats, trial

from alloctune.cli.main import main
from alloctune.errors import AlloctuneError, ConfError, ResultsError
from alloctune.api.export import export_results
from alloctune.report.export import DEFAULT_NOTE, FORMATS, render
from alloctune.results.folder import NO_TRIALS
from alloctune.results.records import TrialState

dotenv_values = pytest.importorskip("dotenv").dotenv_values   # CI has it (test extra); a bare GPU box may not

VAR = "PYTORCH_CUDA_ALLOC_CONF"   # the variable every torch reads first: the one export writes
VALUES = [
    "expandable_segments:True",
    "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:4]",   # commas, colons, brackets, '>'
    "garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
    "backend:cudaMallocAsync",
]
# torch 2.8 reads only PYTORCH_CUDA_ALLOC_CONF; 2.11 reads it, then PYTORCH_ALLOC_CONF, and may warn that it is
# deprecated; 2.13 reads it first too, without the warning.
TORCHES = ["2.8.0+cu128", "2.11.0+cu130", "2.13.0+cu130"]


def docker_env_file(text: str) -> dict:
    """docker's documented --env-file rules (opts/envfile.go): leading whitespace trimmed, empty and '#' lines
    skipped, split at the first '=', the value taken literally (no quotes, no escapes, '#' inside is data)."""
    env = {}
    for line in text.splitlines():
        line = line.lstrip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep and key == key.strip() and " " not in key, f"not KEY=VALUE: {line!r}"
        env[key] = value
    return env


def shell_read(path, shell: str, names) -> list[str]:
    """Source the file in a real shell (in the file's folder, where a stray redirection would land) and print
    each variable and whether it is set at all."""
    script = ". " + shlex.quote(str(path)) + "".join(
        f'; printf "%s|%s\\n" "${{{n}+set}}" "${n}"' for n in names)
    out = subprocess.run([shell, "-c", script], capture_output=True, text=True, check=True, env={},
                         cwd=path.parent).stdout
    return out.splitlines()


@pytest.fixture
def sample(tmp_path):
    """A finished sweep on torch 2.11 that chose expandable segments; a larger setting OOMed, one was skipped."""
    records = (repeats("") + repeats("expandable_segments:True", reserved=11.0)
               + [trial("max_split_size_mb:128", i, state=TrialState.OOM) for i in range(3)])
    skipped = [("expandable_segments:True,max_split_size_mb:128", "upstream bug #119452", None)]
    return make_folder(tmp_path / "w-20260102-030405", records, [choice("expandable_segments:True")], skipped)


@pytest.mark.parametrize("torch", TORCHES)
@pytest.mark.parametrize("value", VALUES)
def test_every_reader_gets_the_value_back(tmp_path, value, torch):
    names = (VAR,)
    provenance = "workload 'w' on torch-x (NVIDIA H200, torch 2.11); results results/w-1"
    c = choice(value, torch=torch)

    env = render(c, "env", provenance)
    (tmp_path / "best.env").write_text(env)
    assert docker_env_file(env) == {n: value for n in names}
    assert dotenv_values(tmp_path / "best.env") == {n: value for n in names}
    assert env.splitlines()[0] == f"# {provenance}"

    shell = render(c, "shell", provenance)
    (tmp_path / "best.sh").write_text(shell)
    for sh in ("bash", "sh"):
        assert shell_read(tmp_path / "best.sh", sh, names) == [f"set|{value}"] * len(names)
    assert not list(tmp_path.glob(":*")), "a '>' in the value was taken as a redirection"

    data = json.loads(render(c, "json", provenance))
    assert data["env"] == {n: value for n in names} and data["conf"] == value and data["is_default"] is False
    assert data["source"] == provenance and data["torch_version"] == torch

    k8s = yaml.safe_load(render(c, "k8s", provenance))
    assert k8s == {"env": [{"name": n, "value": value} for n in names]}

    docker = render(c, "docker", provenance)
    env_lines = [line for line in docker.splitlines() if line.startswith("ENV ")]
    # Dockerfile ENV splits words and removes quotes like a shell does.
    assert dict(w.split("=", 1) for line in env_lines for w in shlex.split(line[4:])) == {n: value for n in names}
    assert docker.startswith("# ")


def test_default_exports_an_empty_value_that_clears_an_inherited_one(tmp_path):
    c = choice("", torch="2.11.0+cu130")
    for fmt in ("env", "shell", "docker", "k8s"):
        assert DEFAULT_NOTE in render(c, fmt, "p"), fmt
    env = render(c, "env", "p")
    (tmp_path / "best.env").write_text(env)
    assert docker_env_file(env) == dotenv_values(tmp_path / "best.env") == {VAR: ""}
    (tmp_path / "best.sh").write_text(render(c, "shell", "p"))
    # Sourced over an inherited value, the variable is set and empty: PyTorch reads that as "no options".
    script = f"export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; . {tmp_path / 'best.sh'}; " \
             'printf "%s|%s" "${PYTORCH_CUDA_ALLOC_CONF+set}" "$PYTORCH_CUDA_ALLOC_CONF"'
    assert subprocess.run(["bash", "-c", script], capture_output=True, text=True).stdout == "set|"
    assert yaml.safe_load(render(c, "k8s", "p"))["env"] == [{"name": VAR, "value": ""}]
    assert json.loads(render(c, "json", "p"))["is_default"] is True


@pytest.mark.parametrize("torch, warns", [("2.8.0+cu128", False), ("2.11.0+cu130", True), ("2.13.0", False)])
def test_a_torch_that_may_warn_of_the_variable_is_said_in_a_comment(torch, warns):
    c = choice("expandable_segments:True", torch=torch)
    for fmt in ("env", "shell", "docker", "k8s"):
        text = render(c, fmt, "p")
        assert ("deprecation warning" in text and "issues/183387" in text) == warns, fmt
        assert all(line.startswith("# ") for line in text.splitlines() if "deprecation" in line)
    data = json.loads(render(c, "json", "p"))
    assert (data["warning"] is not None) == warns and list(data["env"]) == [VAR]


def _torch_reads(env: dict) -> str:
    """The allocator settings this machine's torch takes from `env` (its own lookup, run in a fresh process)."""
    code = "import torch; print(torch._C._accelerator_getAllocatorSettings(), end='')"
    return subprocess.run([sys.executable, "-W", "error", "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize("value", ["expandable_segments:True", ""])
def test_this_torch_reads_the_exported_variable_over_inherited_ones(tmp_path, value):
    """Real torch (this machine's, 2.13): the env file docker would apply over a job that inherits both
    variables gives the job the exported setting, the default's empty value included, and no warning."""
    import torch

    text = render(choice(value, torch=str(torch.__version__)), "env", "p")
    inherited = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64", "PYTORCH_ALLOC_CONF": "max_split_size_mb:32"}
    env = {k: v for k, v in os.environ.items() if not k.endswith("ALLOC_CONF")} | inherited | docker_env_file(text)
    assert _torch_reads(env) == value
    del env["PYTORCH_CUDA_ALLOC_CONF"]   # without the export, the inherited PYTORCH_ALLOC_CONF would count
    assert _torch_reads(env) == "max_split_size_mb:32"


def test_provenance_is_one_comment_line_even_with_newlines():
    text = render(choice("expandable_segments:True", torch="2.8.0"), "env", "workload 'a\nb'\r\n on x")
    assert text.splitlines()[0] == "# workload 'a b' on x" and len(text.splitlines()) == 2


def test_unknown_torch_version_writes_the_variable_every_torch_reads():
    text = render(choice("expandable_segments:True", torch=None), "env", "p")
    assert docker_env_file(text) == {VAR: "expandable_segments:True"} and len(text.splitlines()) == 2


def test_values_that_a_reader_would_change_are_refused():
    for bad in ("pinned_num_register_threads:a b", "foo:$HOME", "foo:'x'", "foo:a#b"):
        with pytest.raises(ConfError, match="literally"):
            render(choice(bad), "env", "p")
    with pytest.raises(ConfError):
        render(choice("expandable_segments:true"), "env", "p")   # not a valid setting at all
    with pytest.raises(AlloctuneError, match="unknown export format 'toml'"):
        render(choice(""), "toml", "p")


def test_export_results_from_a_folder(sample):
    text = export_results(sample.path).text
    assert docker_env_file(text) == {VAR: "expandable_segments:True"}
    comment = text.splitlines()[0]
    for fact in ("workload 'w'", "torch-2.11.0", "NVIDIA H200", "torch 2.11.0+cu130", "measured (cuda)",
                 "2026-01-02T03:04:05Z", str(sample.path)):
        assert fact in comment
    # a parent folder holding exactly one results folder works the same
    assert export_results(sample.path.parent, "json").text == export_results(sample.path, "json").text
    data = json.loads(export_results(sample.path, "json").text)
    assert data["basis"] == "measured" and "simulated_torch" not in data


def test_a_replayed_choice_says_the_torch_its_replays_followed_not_a_build_the_card_never_ran(tmp_path):
    """A sweep that replayed an H200's trace (torch 2.11) as this machine's CPU torch, which it was told runs the
    job: the JSON says replayed and 2.13, the header names the card beside the torch replayed, not the CPU build."""
    env = {"torch": "2.11.0+cu130", "gpu": "NVIDIA H200", "trace_torch": "2.11.0+cu130", "simulated_as": "2.13.0+cpu"}
    env_id = "sim:torch-2.13.0+cpu"
    records = [replace(trial(conf, reserved=peak, tput=None, backend="sim", env_id=env_id), env=env)
               for conf, peak in (("", 15.0), ("expandable_segments:True", 10.0))]
    replayed = replace(choice("expandable_segments:True", env_id=env_id, backend="sim", torch="2.13.0+cpu"), env=env)
    folder = make_folder(tmp_path / "w-1", records, [replayed], envs={"torch-2.13.0+cpu": {"torch": "2.13.0+cpu"}})
    data = json.loads(export_results(folder.path, "json").text)
    assert (data["basis"], data["simulated_torch"], data["torch_version"]) == ("replayed", "2.13", "2.13.0+cpu")
    assert "(NVIDIA H200); replayed with torch 2.13's allocator from a trace recorded with torch 2.11.0+cu130;" \
           in data["source"] and "torch 2.13.0+cpu" not in data["source"]


H100 = "NVIDIA H100 80GB HBM3"
DRY_RUN = {"arch": "h100", "card": H100, "table": "torch 2.11 sm90", "invented": {"shape": 1, "item": 3}}
FROM_A_DRY_RUN = (f"replayed with torch 2.13's allocator from a dry run for {H100} (table row torch 2.11 sm90; made "
                  f"up 4 values the script read from the GPU: item 3, shape 1); nothing was measured;")


def test_a_dry_runs_choice_says_so_in_every_format_and_in_best_env(tmp_path, capsys):
    """`sweep --dry-run`'s trials (a CPU torch's dry run for an H100), decided by `report` as the sweep decides: its
    best.env and every format say the figures come from a dry run for the card, nothing measured, not from a trace
    recorded on a GPU; the JSON adds the dry run as every --json gives it, its basis still replayed."""
    env = {"torch": "2.13.0+cpu", "gpu": H100, "trace_torch": "2.13.0+cpu", "simulated_as": "2.13.0",
           "dry_run": DRY_RUN}
    env_id = "sim:torch-2.13.0"
    records = [replace(trial(conf, reserved=peak, tput=None, backend="sim", env_id=env_id), env=env)
               for conf, peak in (("", 15.0), ("expandable_segments:True", 10.0))]
    folder = make_folder(tmp_path / "cmd-1", records, envs={"torch-2.13.0+cpu": {"torch": "2.13.0+cpu"}})
    assert main(["report", str(folder.path)]) == 0
    capsys.readouterr()
    best_env = (folder.path / "best.env").read_text()
    assert FROM_A_DRY_RUN in best_env and "recorded with" not in best_env
    for fmt in FORMATS:
        text = export_results(folder.path, fmt).text
        assert FROM_A_DRY_RUN in text and "recorded with" not in text, fmt
    data = json.loads(export_results(folder.path, "json").text)
    assert data["basis"] == "replayed" and data["simulated_torch"] == "2.13"
    assert data["dry_run"]["card"] == H100 and data["dry_run"]["invented_by_kind"] == {"item": 3, "shape": 1}
    assert "made up 4 values the script read from the GPU: item 3, shape 1" in data["reasons"][0]
    assert "the GPU: item 3, shape 1)" in (folder.path / "summary.md").read_text()


def test_a_choice_not_from_a_dry_run_has_a_null_dry_run(sample):
    assert json.loads(export_results(sample.path, "json").text)["dry_run"] is None


def test_conf_exports_another_setting_that_ran_and_fitted(sample):
    data = json.loads(export_results(sample.path, "json", conf="default").text)
    assert data["conf"] == "default" and data["env"] == {"PYTORCH_CUDA_ALLOC_CONF": ""} and data["is_default"]
    assert "the sweep chose expandable_segments:True" in data["reasons"][0]
    with pytest.raises(ResultsError, match=r"'max_split_size_mb:128' did not fit on torch-2.11.0: oom in 3 of 3"):
        export_results(sample.path, conf="max_split_size_mb:128")
    with pytest.raises(ResultsError, match="was skipped for torch-2.11.0: upstream bug #119452"):
        export_results(sample.path, conf="max_split_size_mb:128,expandable_segments:True")   # any key order
    with pytest.raises(ResultsError, match="was not run .*settings run: default, expandable_segments:True"):
        export_results(sample.path, conf="roundup_power2_divisions:4")
    with pytest.raises(ConfError):
        export_results(sample.path, conf="max_split_size_mb")


def test_a_setting_set_by_hand_says_so_in_every_format_and_never_that_the_default_was_best(sample):
    """`--conf default` where the sweep chose expandable segments: each file says the setting was set by hand and
    what the sweep chose, and that the empty value gives the defaults, not that they were best."""
    for fmt in FORMATS:
        text = export_results(sample.path, fmt, conf="default").text
        assert "set by hand; the sweep chose expandable_segments:True" in text, fmt
        assert DEFAULT_NOTE not in text and "were best" not in text, fmt
    assert "the default allocator settings: the empty value makes" in export_results(sample.path, conf="").text
    picked = export_results(sample.path, "docker", conf="expandable_segments:True").text
    assert "# set by hand; the sweep chose expandable_segments:True\n" in picked
    assert "set by hand" not in export_results(sample.path, "docker").text


def test_refuses_a_sweep_that_did_not_finish(tmp_path):
    folder = make_folder(tmp_path / "w-1", repeats(""))
    with pytest.raises(ResultsError, match="has not finished a choice"):
        export_results(folder.path)


def test_refuses_when_nothing_fits(tmp_path):
    folder = make_folder(tmp_path / "w-1", [trial("", state=TrialState.OOM)], [choice(None)])
    with pytest.raises(ResultsError, match="no setting fits on torch-2.11.0"):
        export_results(folder.path)


def test_refuses_missing_and_unknown_folders(tmp_path):
    with pytest.raises(ResultsError, match="no results folder"):
        export_results(tmp_path / "nope")
    with pytest.raises(ResultsError, match="no results folder"):
        export_results(tmp_path)


def test_selects_by_workload_and_refuses_ambiguity(tmp_path):
    make_folder(tmp_path / "a-1", repeats(""), [choice("")], workload="alpha")
    make_folder(tmp_path / "b-1", repeats("expandable_segments:True"), [choice("expandable_segments:True")],
                workload="beta")
    with pytest.raises(ResultsError, match=r"(?s)holds 2 results folders.*\n  \S*a-1 \(workload 'alpha'\)\n.*'beta'"):
        export_results(tmp_path)
    assert "expandable_segments:True" in export_results(tmp_path, workload="beta").text
    with pytest.raises(ResultsError, match="no results for workload 'gamma'; workloads here: alpha, beta"):
        export_results(tmp_path, workload="gamma")
    make_folder(tmp_path / "b-2", repeats(""), [choice("")], workload="beta")   # the same workload swept twice
    with pytest.raises(ResultsError, match="give the folder itself"):
        export_results(tmp_path, workload="beta")


def test_a_folder_of_results_passes_by_those_holding_only_sweep_json_in_a_line_each(sample, capsys):
    """Beside a finished sweep, one refused or stopped before its first trial (sweep.json alone, as a sweep's first
    step leaves it): export leaves it out and says so in one line, as `report` does; given itself, it is refused as
    before."""
    parent = sample.path.parent
    unstarted = new_folder(parent / "w-2", sample.info())
    assert main(["export", str(parent)]) == 0
    out, err = capsys.readouterr()
    assert out == export_results(sample.path).text
    assert err == f"{unstarted.path} holds no trials ({NO_TRIALS}): not exported\n"
    assert [f.path for f in export_results(parent).skipped] == [unstarted.path]
    with pytest.raises(ResultsError, match="has not finished a choice"):
        export_results(unstarted.path)


def test_selects_by_environment_and_prefers_measured(tmp_path):
    records = repeats("") + repeats("", env_id="torch-2.8.0", torch="2.8.0+cu128")
    folder = make_folder(tmp_path / "w-1", records, [
        choice("expandable_segments:True"),
        choice("max_split_size_mb:256", env_id="torch-2.8.0", torch="2.8.0+cu128"),
        choice("roundup_power2_divisions:4", env_id="torch-2.8.0", backend="sim", torch="2.8.0+cu128")])
    with pytest.raises(ResultsError, match="holds 2 choices; choose one: env_id torch-2.11.0.*env_id torch-2.8.0"):
        export_results(folder.path)
    # the 2.8 environment has a replayed and a measured choice: the measured one wins; 2.8 reads one variable
    assert docker_env_file(export_results(folder.path, env_id="torch-2.8.0").text) == {VAR: "max_split_size_mb:256"}
    with pytest.raises(ResultsError, match="no choice for environment 'torch-3.0'; environments: torch-2.11.0, "
                                           "torch-2.8.0"):
        export_results(folder.path, env_id="torch-3.0")


def test_cli_writes_the_file_and_exits_2_on_errors(sample, tmp_path):
    out = tmp_path / "best.sh"
    run = subprocess.run([sys.executable, "-m", "alloctune", "export", str(sample.path), "--format", "shell",
                          "-o", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert shell_read(out, "bash", (VAR, "PYTORCH_ALLOC_CONF")) == ["set|expandable_segments:True", "|"]
    run = subprocess.run([sys.executable, "-m", "alloctune", "export", str(sample.path), "--conf",
                          "max_split_size_mb:128"], capture_output=True, text=True)
    assert run.returncode == 2 and "did not fit" in run.stderr and run.stdout == ""

def test_cli_prints_every_format(sample, capsys):
    for fmt in FORMATS:
        assert main(["export", str(sample.path), "-f", fmt]) == 0
        assert capsys.readouterr().out == export_results(sample.path, fmt).text
    assert main(["export", str(sample.path), "--env", "nope"]) == 2
    assert "no choice for environment 'nope'" in capsys.readouterr().err


CONTROLS = "G\x1b[2J\x1b]0;title\x07\x00\r\x7f\x85\u202eX"


def raw_controls(text: str) -> list[str]:
    """The characters a terminal (or a YAML reader) would act on: every control but newline and tab."""
    return [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f or c == "\u202e"]


def test_control_characters_in_the_provenance_reach_no_consumer_raw(tmp_path):
    provenance = f"workload 'w' on {CONTROLS}; results /tmp/{CONTROLS}"
    c = choice("expandable_segments:True", torch="2.13.0")
    for fmt in FORMATS:
        assert raw_controls(render(c, fmt, provenance)) == [], fmt
    env = render(c, "env", provenance)
    (tmp_path / "best.env").write_text(env)
    assert docker_env_file(env) == dotenv_values(tmp_path / "best.env") == {VAR: "expandable_segments:True"}
    (tmp_path / "best.sh").write_text(render(c, "shell", provenance))
    assert shell_read(tmp_path / "best.sh", "bash", [VAR]) == ["set|expandable_segments:True"]
    assert yaml.safe_load(render(c, "k8s", provenance)) == {"env": [{"name": VAR, "value": "expandable_segments:True"}]}
    assert "␛[2J" in json.loads(render(c, "json", provenance))["source"]


POD = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n    - name: app\n      image: img\n{paste}\n"
DEPLOYMENT = ("apiVersion: apps/v1\nkind: Deployment\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n"
              "        image: img\n{paste}\n        resources: {{}}\n")


@pytest.mark.parametrize("manifest, indent", [(POD, 6), (DEPLOYMENT, 8)])
def test_the_k8s_export_pastes_under_a_container_at_any_indentation(manifest, indent):
    """Pasted as an editor pastes at the cursor: the first line where the cursor stands (the container's
    indentation), the lines after it as they are."""
    c = choice("roundup_power2_divisions:[256:1,>:8]", torch="2.11.0+cu130")
    text = render(c, "k8s", f"alloctune: provenance with {CONTROLS}")
    spec = yaml.safe_load(manifest.format(paste=" " * indent + text.rstrip("\n")))
    pod = spec["spec"] if spec["kind"] == "Pod" else spec["spec"]["template"]["spec"]
    assert pod["containers"][0]["env"] == [{"name": VAR, "value": "roundup_power2_divisions:[256:1,>:8]"}]
    assert pod["containers"][0]["image"] == "img"
