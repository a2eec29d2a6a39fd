import json
import os
import subprocess
import sys
import time

import pids
import pytest
import torch

from alloctune.errors import ProbeError
from alloctune.settings.conf import AllocConf
from alloctune.settings.grid import DEFAULT_GRID, expand
from alloctune.settings.versions import check_conf, parse_version
from alloctune.child import probe as probe_child
from alloctune.trial.probe import (ProbeResult, SettingsJudge, check_settings, check_settings_detail, probe,
                                   probe_and_judge)
from alloctune.child.provenance import collect_env
from standin import PROBE_AS_ONE_GPU

LOCAL_VERSION = parse_version(torch.__version__)


@pytest.fixture(scope="module")
def local():
    return probe(sys.executable)


def test_probe_local_interpreter(local):
    assert local.torch_version == torch.__version__
    assert local.torch_git == torch.version.git_version
    assert local.cuda_version == torch.version.cuda
    assert os.path.isabs(local.python) and os.path.exists(local.python)
    assert local.python_version == ".".join(map(str, sys.version_info[:3]))
    assert local.env_id == f"torch-{torch.__version__}"
    assert local.cuda_available == torch.cuda.is_available()
    assert local.device_count == len(local.devices)
    assert local.host


def test_collect_env_matches_probe(local):
    env = collect_env()
    assert json.loads(json.dumps(env)) == env
    assert env["torch"] == local.torch_version and env["torch_git"] == local.torch_git
    assert env["cuda"] == local.cuda_version and env["python"] == local.python_version and env["host"] == local.host
    if local.cuda_available:
        assert env["gpu"] == local.devices[0]["name"] and env["gpu_memory"] == local.devices[0]["total_memory"]
    else:
        assert env["gpu"] is None and env["gpu_memory"] is None and env["driver"] is None


def test_probe_result_json_round_trip(local):
    data = json.loads(json.dumps(local.to_json()))
    assert ProbeResult.from_json(data) == local
    assert ProbeResult.from_json({**data, "added_later": 1}) == local
    del data["torch_version"]
    with pytest.raises(TypeError):
        ProbeResult.from_json(data)


# One child judges every setting the tests below look at (each child pays for a torch import).
OK_TEXTS = ["", "expandable_segments:True", "max_split_size_mb:128", "garbage_collection_threshold:0.6",
            "roundup_power2_divisions:[256:1,512:2,>:4]", "backend:cudaMallocAsync"]
BAD_TEXTS = ["max_split_size_mb:10", "foo:1", "garbage_collection_threshold:1"]
TABLE_TEXTS = DEFAULT_GRID + [
    "max_split_size_mb:20", "max_split_size_mb:19", "garbage_collection_threshold:0.99",
    "large_segment_size_mb:11", "large_segment_size_mb:10", "large_segment_size_mb:64,max_split_size_mb:64",
    "large_segment_size_mb:64,max_split_size_mb:32", "large_segment_size_mb:64,max_non_split_rounding_mb:32",
    "max_non_split_rounding_mb:20", "per_process_memory_fraction:0.5", "roundup_power2_divisions:[1:2,2:4]",
    "roundup_bypass_threshold_mb:10", "bar:True", "large_segment_size_mb:64", "max_split_size_mb:32"]
HAS_PARSER = hasattr(torch._C, "_accelerator_setAllocatorSettings")


@pytest.fixture(scope="module")
def local_check():
    return check_settings_detail(sys.executable, expand(OK_TEXTS + BAD_TEXTS + TABLE_TEXTS))


def test_check_settings_local(local_check):
    assert local_check.torch_version == torch.__version__
    assert local_check.method in ("torch", "torch+static", "static")
    verdicts = local_check.verdicts
    assert list(verdicts)[:len(OK_TEXTS) + len(BAD_TEXTS)] == OK_TEXTS + BAD_TEXTS   # order kept
    for ok in OK_TEXTS:
        assert verdicts[ok] is None, (ok, verdicts[ok])
    assert "max_split_size_mb" in verdicts["max_split_size_mb:10"]
    assert "foo" in verdicts["foo:1"]


def test_the_probe_child_judges_the_settings_as_the_judge_does(local, local_check):
    """A sweep's start: one child gives the facts and the verdicts, the same as the probe and the judge apart."""
    facts, check = probe_and_judge(sys.executable, expand(OK_TEXTS + BAD_TEXTS + TABLE_TEXTS))
    assert facts == local and check == local_check
    assert probe_and_judge(sys.executable, [])[1] is None   # nothing asked: nothing judged


def test_an_interpreter_that_answers_the_probe_without_verdicts_is_judged_apart(tmp_path):
    """A wrapper answering the probe itself (the tests' stand-in GPU) leaves the verdicts to the judge."""
    stand_in = tmp_path / "python3"
    stand_in.write_text("#!" + sys.executable + "\nimport json, os, sys\n"
                        + PROBE_AS_ONE_GPU.format(torch="2.13.0", python=sys.executable))
    stand_in.chmod(0o755)
    facts, check = probe_and_judge(str(stand_in), [AllocConf()])
    assert facts.torch_version == "2.13.0" and check is None


def test_check_settings_plain_api_matches_detail():
    confs = [AllocConf(), AllocConf.parse("max_split_size_mb:10")]
    verdicts = check_settings(sys.executable, confs)
    assert verdicts[""] is None and "max_split_size_mb" in verdicts["max_split_size_mb:10"]


@pytest.mark.skipif(not HAS_PARSER, reason="this torch has no run-time settings parser without CUDA")
def test_torch_parser_is_used_and_errors_are_torchs(local_check):
    assert local_check.method in ("torch", "torch+static")
    # torch's own words, not the table's
    assert local_check.verdicts["max_split_size_mb:10"].startswith(f"torch {torch.__version__} rejects it:")
    assert "too small" in local_check.verdicts["max_split_size_mb:10"]
    assert "garbage_collect_threshold is invalid" in local_check.verdicts["garbage_collection_threshold:1"]


@pytest.mark.skipif(LOCAL_VERSION < (2, 11, 0), reason="large_segment_size_mb needs torch >= 2.11")
def test_parses_are_isolated_from_each_other(local_check):
    # large_segment_size_mb persists in torch's config between parses and raises the minimum of max_split_size_mb:
    # judged apart, both pass; together, they fail.
    verdicts = local_check.verdicts
    assert verdicts["large_segment_size_mb:64"] is None and verdicts["max_split_size_mb:32"] is None
    assert ">= 64" in verdicts["max_split_size_mb:32,large_segment_size_mb:64"]


def test_table_agrees_with_local_torch(local_check):
    for text, verdict in local_check.verdicts.items():
        table = check_conf(AllocConf.parse(text), torch.__version__)
        assert (verdict is None) == (table is None), (text, verdict, table)


@pytest.mark.skipif(not HAS_PARSER, reason="this torch has no run-time settings parser without CUDA")
def test_raw_child_ignores_users_alloc_conf_and_rejects_lowercase_bool(monkeypatch):
    # A bad setting in the user's shell would otherwise be parsed when the child's torch loads.
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "nonsense")
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "nonsense")
    # conf.py refuses 'true' before it gets this far; this shows the real parser agrees.
    with SettingsJudge(sys.executable) as judge:
        assert judge.hello()["parser"]
        errors = judge.parse_errors(["", "expandable_segments:true", "expandable_segments:True"])
    assert errors[""] is None and errors["expandable_segments:True"] is None
    assert "true" in errors["expandable_segments:true"]


# Settings that leave something behind in torch's config (large_segment_size_mb, expandable_segments), each
# followed by those whose verdict it would change, valid and not: what parsing in place must not get wrong.
LEAKERS = ["large_segment_size_mb:64", "max_split_size_mb:20,large_segment_size_mb:32", "large_segment_size_mb:10",
           "large_segment_size_mb:12,expandable_segments:True", "expandable_segments:True,max_split_size_mb:10"]
FOLLOWERS = ["max_split_size_mb:20", "max_split_size_mb:10", "max_non_split_rounding_mb:40",
             "expandable_segments:True,max_split_size_mb:10", "large_segment_size_mb:64,max_split_size_mb:32",
             "garbage_collection_threshold:0.6", "roundup_power2_divisions:[1:2,64:8,>:4]", "pinned_num_register_threads:8"]


@pytest.mark.skipif(not HAS_PARSER, reason="this torch has no run-time settings parser without CUDA")
def test_one_child_judges_every_batch_as_a_fresh_torch_would():
    texts = [t for leaker in LEAKERS for t in [leaker, *FOLLOWERS]]
    parse = probe_child._settings_parser(torch)
    fresh = {t: probe_child._parse_isolated(parse, t) for t in texts}   # each in a fork of this process
    with SettingsJudge(sys.executable) as judge:
        pid = judge._proc.pid
        together = judge.parse_errors(texts)
        apart = {t: e for leaker in LEAKERS for t, e in judge.parse_errors([leaker]).items()}
        apart |= judge.parse_errors(FOLLOWERS)   # a batch after the leakers' batches
        assert judge._proc.pid == pid and pids.running(pid)   # the same child all along
    assert not pids.running(pid)
    assert together == fresh and apart == {t: fresh[t] for t in apart}
    if LOCAL_VERSION >= (2, 11, 0):   # what the care is for: parsed one after the other, the verdict changes
        assert fresh["max_split_size_mb:20"] is None
        assert _after("large_segment_size_mb:64", "max_split_size_mb:20") is not None


def _after(first: str, then: str) -> str | None:
    """The verdict on `then` parsed right after `first`, in a fork of this process (which stays as it was)."""
    read_fd, write_fd = os.pipe()
    if (pid := os.fork()) == 0:
        parse = probe_child._settings_parser(torch)
        parse_first = probe_child._parse(parse, first)
        os.write(write_fd, json.dumps([parse_first, probe_child._parse(parse, then)]).encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        answer = json.loads(pipe.read())
    os.waitpid(pid, 0)
    return answer[1]


def test_the_judging_child_dies_with_its_parent(tmp_path):
    script = ("import sys\nfrom alloctune.trial.probe import SettingsJudge\n"
              "judge = SettingsJudge(sys.executable).open()\njudge.hello()\n"
              "print(judge._proc.pid, flush=True)\nimport time; time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert pids.running(child)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 30
    while pids.running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pids.running(child)


def _fake_torch(tmp_path, body):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(body)
    return str(tmp_path)


def test_static_fallback_without_parser(tmp_path, monkeypatch):
    # A stand-in for an old CPU-only torch (2.3) that has no run-time parser: the child finds this package first.
    fake = _fake_torch(tmp_path, "import types\n__version__ = '2.3.1+cpu'\n_C = types.SimpleNamespace()\n")
    monkeypatch.setenv("PYTHONPATH", fake)
    check = check_settings_detail(sys.executable, [AllocConf(), AllocConf.parse("expandable_segments:True"),
                                                   AllocConf.parse("max_non_split_rounding_mb:64")])
    assert check.method == "static" and check.torch_version == "2.3.1+cpu"
    assert check.verdicts[""] is None and check.verdicts["expandable_segments:True"] is None
    assert "needs torch >= 2.6" in check.verdicts["max_non_split_rounding_mb:64"]


def test_missing_interpreter(tmp_path):
    missing = str(tmp_path / "no" / "python3")
    with pytest.raises(ProbeError, match="not found") as info:
        probe(missing)
    assert missing in str(info.value)
    with pytest.raises(ProbeError, match="alloctune-no-such-python"):
        check_settings("alloctune-no-such-python", [AllocConf()])


def test_interpreter_without_torch(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    for ask in (probe, lambda python: check_settings(python, [AllocConf()])):
        with pytest.raises(ProbeError, match="cannot import torch") as info:
            ask(python)
        assert python in str(info.value) and "ModuleNotFoundError" in str(info.value)


def test_broken_torch_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", _fake_torch(tmp_path, "raise OSError('libcudart.so.13: cannot open')\n"))
    with pytest.raises(ProbeError, match="cannot import torch.*libcudart"):
        probe(sys.executable)


def _script(tmp_path, body):
    path = tmp_path / "fakepython"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("ask", [probe, lambda python: check_settings(python, [AllocConf()])])
def test_interpreter_that_crashes(tmp_path, ask):
    python = _script(tmp_path, "echo 'Fatal Python error: init failed' >&2\nexit 1\n")
    with pytest.raises(ProbeError, match="exit code 1") as info:
        ask(python)
    assert "Fatal Python error" in str(info.value) and python in str(info.value)
    silent = _script(tmp_path, "exit 0\n")
    with pytest.raises(ProbeError, match=r"exit code 0\): it printed nothing"):
        ask(silent)


@pytest.mark.parametrize("ask", [probe, lambda python, timeout: check_settings(python, [], timeout)])
def test_interpreter_that_hangs(tmp_path, ask):
    python = _script(tmp_path, "exec sleep 30\n")
    with pytest.raises(ProbeError, match="longer than 0.5 s"):
        ask(python, timeout=0.5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_probe_and_check_on_gpu():
    result = probe(sys.executable)
    assert result.cuda_available and result.device_count >= 1
    assert all(d["total_memory"] > 0 and d["name"] for d in result.devices)
    assert result.driver
    check = check_settings_detail(sys.executable, expand(DEFAULT_GRID + ["foo:1", "max_split_size_mb:10"]))
    # A CUDA build's parser should check keys itself ('torch'); either way 'foo' must be refused.
    assert check.method in ("torch", "torch+static"), check
    assert "foo" in check.verdicts["foo:1"]
    assert "max_split_size_mb" in check.verdicts["max_split_size_mb:10"]
    assert all(check.verdicts[c] is None for c in DEFAULT_GRID), check.verdicts
