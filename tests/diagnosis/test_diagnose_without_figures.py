"""`alloctune diagnose` on out-of-memory errors that print no figures (runtime/oom.py's words, which diagnose and the
trials share): cuDNN's convolution without an algorithm, named a likely OOM; a library's OOM beside an allocator's
message or a snapshot, noted rather than dropped or refused; and a long log whose OOM lies before the part read."""
import json
import shutil

import pytest
from bounded import bounded_cli, one_line_error
from clirun import ROOT

from alloctune.diagnosis import diagnose, sources
from alloctune.errors import DiagnoseError
from alloctune.results.records import TrialRecord, TrialState
from alloctune.results.trials import TrialStore

SNAPSHOT = ROOT / "tests" / "fixtures" / "oom" / "h200" / "frag" / "oom-rank0.pickle"
LIKELY = "likely out of memory: cuDNN found no algorithm whose workspace fits"
ALLOCATORS = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
              "of 79.19 GiB of which 1.00 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and "
              "7.50 GiB is reserved by PyTorch but unallocated.\n")
TRACEBACK = "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    loss.backward()\n"


@pytest.mark.parametrize("error", [
    "RuntimeError: Unable to find a valid cuDNN algorithm to run convolution",   # Conv_v7.cpp
    "RuntimeError: GET was unable to find an engine to execute this computation",   # Conv_v8.cpp, the v8 API
])
def test_cudnns_convolution_without_an_algorithm_is_named_a_likely_oom(tmp_path, error):
    log = tmp_path / "job.log"
    log.write_text("epoch 1\n" + TRACEBACK + error + "\n")
    said = one_line_error(bounded_cli("diagnose", log))
    assert f"holds '{error.partition(': ')[2]}': {LIKELY}" in said and "holds no" not in said, said
    assert "does not support" in said and "dump_on_oom" in said   # not a certain OOM, and where figures are
    folder = tmp_path / "run"   # a sweep's trial that ended so (runtime/oom.py: where the allocator ran out)
    TrialStore(folder / "trials.jsonl").append(TrialRecord("w", "h", "", 0, "torch-2.11.0", "cuda", TrialState.OOM,
                                                           error=error))
    said = one_line_error(bounded_cli("diagnose", folder))
    assert LIKELY in said and "kept no message" not in said, said


def test_a_librarys_oom_beside_the_allocators_message_is_noted(tmp_path):
    """Two OOMs of different kinds in one log: the allocator's is diagnosed, the one without figures said too."""
    log = tmp_path / "job.log"
    log.write_text(ALLOCATORS + "retrying with a smaller batch\n" + TRACEBACK
                   + "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED\n")
    run = bounded_cli("diagnose", log, "--json")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["message"]["requested_bytes"] == 2 * 2**30
    assert any("also holds 'CUDNN_STATUS_ALLOC_FAILED'" in w for w in data["warnings"]), data["warnings"]
    alone = tmp_path / "alone.log"   # the allocator's message, its class named in the code a traceback shows
    alone.write_text(TRACEBACK + "  except torch.OutOfMemoryError:\n" + ALLOCATORS)
    assert not any("also holds" in w for w in diagnose(alone).warnings)


def test_a_snapshots_message_without_figures_is_noted_and_the_snapshot_diagnosed(tmp_path):
    """dump_on_oom saves the message of any OOM nobody caught: cuDNN's likely one after the allocator's own."""
    snapshot = tmp_path / "oom-rank0.pickle"
    shutil.copyfile(SNAPSHOT, snapshot)
    (tmp_path / "oom-rank0.txt").write_text("Unable to find a valid cuDNN algorithm to run convolution")
    d = diagnose(snapshot)
    assert d.verdict is not None and d.sources == [str(snapshot)]
    assert any("beside the snapshot, holds 'Unable to find" in w and LIKELY in w for w in d.warnings), d.warnings


def test_a_long_logs_oom_before_the_part_read_is_not_called_absent(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "LOG_TAIL_BYTES", 256 * 1024)
    steps = "".join(f"step {i} loss 0.5\n" for i in range(60_000))   # about 1 MiB
    log = tmp_path / "job.log"
    log.write_text(ALLOCATORS + steps)
    with pytest.raises(DiagnoseError, match=r"holds, in its last 256.00 KiB \(all that is read of a long log\), no "
                                            "CUDA out-of-memory message"):
        diagnose(log)
    log.write_text(steps + ALLOCATORS)
    assert diagnose(log).message.requested == 2 * 2**30
    log.write_text("step 1\n")   # a short log is read whole: nothing said of a part
    with pytest.raises(DiagnoseError) as short:
        diagnose(log)
    assert "in its last" not in str(short.value)
