"""`alloctune diagnose` on what a new user's logs hold (issue 29): figures no allocator state has, several OOMs of
several ranks in one log, the setting recommended as data, and the known problems that matter for the job."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from alloctune.diagnosis import diagnose
from alloctune.diagnosis.facts import Cause, Check

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ROOT / "tests" / "fixtures" / "oom" / "public"


def run_cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", "alloctune", "diagnose", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)


def message(requested="20.00 MiB", gpu=0, total="79.15 GiB", free="1.91 GiB", allocated="51.75 GiB",
            unallocated="6.05 GiB", extra=""):
    """A torch 2.2+ message with these figures."""
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {requested}. GPU {gpu} has a total "
            f"capacity of {total} of which {free} is free. {extra}Of the allocated memory {allocated} is allocated by "
            f"PyTorch, and {unallocated} is reserved by PyTorch but unallocated. If reserved but unallocated memory "
            "is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n")


@pytest.mark.parametrize("figures, check", [
    (dict(total="1.00 GiB", free="50.00 GiB", allocated="100.00 MiB", unallocated="10.00 MiB"),
     Check.FREE_OVER_TOTAL),
    (dict(requested="0 bytes", total="0 bytes", free="0 bytes", allocated="0 bytes", unallocated="0 bytes"),
     Check.NO_CARD),
    (dict(total="24.00 GiB", free="1.00 GiB", allocated="30.00 GiB", unallocated="1.00 GiB"),
     Check.RESERVED_OVER_TOTAL),
])
def test_impossible_figures_get_no_verdict(tmp_path, figures, check):
    path = tmp_path / "oom.txt"
    path.write_text(message(**figures))
    d = diagnose(path)
    assert d.verdict.cause is Cause.INCONSISTENT and check in {i.check for i in d.verdict.figures.inconsistent}
    assert d.recommended_conf is None and d.known_problems == []
    done = run_cli(path)
    assert done.returncode == 0 and "No verdict (inconsistent figures): The figures are inconsistent" in done.stdout
    assert "shortage" not in done.stdout and "PYTORCH_CUDA_ALLOC_CONF=" not in done.stdout
    data = json.loads(run_cli(path, "--json").stdout)
    assert data["cause"] == "inconsistent" and data["recommended_conf"] is None


@pytest.mark.parametrize("source, conf, basis", [
    (PUBLIC / "v2_2-wrapped-frag.txt", "expandable_segments:True", "verdict"),     # the verdict's suggestion
    (PUBLIC / "v1early-cached.txt", "max_split_size_mb:512", "verdict"),           # a torch without expandable ones
    (ROOT / "tests" / "fixtures" / "oom" / "h200" / "frag" / "oom-rank0.pickle", "expandable_segments:True",
     "replay"),
    (PUBLIC / "v2_1-shortage.txt", None, None),                                    # no setting can help
])
def test_the_setting_recommended_is_one_datum_the_text_and_json_both_say(source, conf, basis):
    d = diagnose(source)
    assert d.recommended_conf == conf and (d.recommendation.basis.value if d.recommendation else None) == basis
    data = json.loads(run_cli(source, "--json").stdout)
    assert data["recommended_conf"] == conf
    assert (data["recommendation"] or {}).get("basis") == basis
    named = [step for step in data["next_steps"] if "PYTORCH_CUDA_ALLOC_CONF=" in step]
    if conf is None:
        assert named == []
    else:   # the first step names it, and no step names another
        assert f"PYTORCH_CUDA_ALLOC_CONF={conf} " in data["next_steps"][0]
        assert all(f"PYTORCH_CUDA_ALLOC_CONF={conf} " in step for step in named)
    assert data["next_steps"] == d.next_steps
