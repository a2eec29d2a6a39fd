"""alloctune.dump_on_oom runs inside the user's job: it must stay light, and name files by rank. (Its GPU side is
exercised by the `oom` job of scripts/evidence_jobs.toml (scripts/h200_oom.sh at the time); the files it wrote there are the fixtures of test_diagnose_h200.py.)"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from alloctune.runtime.process import rank

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("env,expected", [({}, None), ({"LOCAL_RANK": "3"}, 3), ({"RANK": "5", "LOCAL_RANK": "1"}, 5),
                                          ({"RANK": "x", "LOCAL_RANK": "2"}, 2)])
def test_rank_comes_from_rank_then_local_rank(monkeypatch, env, expected):
    for name in ("RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert rank() == expected


def test_importing_it_pulls_in_no_heavy_module():
    code = ("import sys, alloctune; alloctune.dump_on_oom; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'yaml', 'rich', 'scipy', 'torch'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"  # torch is imported when dump_on_oom is called, not before
