"""Imported at start-up by a user's command under `alloctune record -- CMD` (this folder is put first on
PYTHONPATH): starts torch's allocation-history recording and dumps the snapshot, with the run's peaks, at exit.

Chains to any sitecustomize the user's environment already had, so we do not hide theirs.
"""
import atexit
import os
import sys


def _chain_user_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    path = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import sitecustomize  # noqa: F401  (the user's own, if any)
    except ImportError:
        pass
    finally:
        sys.path[:] = path
        sys.modules["sitecustomize"] = ours  # the import system expects to find this module under its name


def _start():
    # Popped, so that processes the program spawns (data loader workers) do not record over its trace.
    out = os.environ.pop("ALLOCTUNE_RECORD_TO", None)
    if not out:
        return
    import torch

    if not torch.cuda.is_available():
        return
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=10_000_000)

    def dump():
        import pickle

        snapshot = torch.cuda.memory._snapshot()
        stats = torch.cuda.memory_stats()
        free, total = torch.cuda.mem_get_info()
        snapshot["alloctune"] = {  # read back as the trace's meta by alloctune.sim.trace
            "command": sys.argv, "torch_version": torch.__version__, "device_total_bytes": total,
            "measured": [{"conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "state": "ok",
                          "peak_reserved_bytes": stats.get("reserved_bytes.all.peak"),
                          "peak_allocated_bytes": stats.get("allocated_bytes.all.peak"),
                          "peak_requested_bytes": stats.get("requested_bytes.all.peak"),
                          "num_alloc_retries": stats.get("num_alloc_retries"),
                          "num_ooms": stats.get("num_ooms")}],
        }
        with open(out, "wb") as f:
            pickle.dump(snapshot, f)

    atexit.register(dump)


_chain_user_sitecustomize()
_start()
