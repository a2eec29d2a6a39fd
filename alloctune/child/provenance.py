"""Provenance of a trial process: torch and its git version, CUDA, driver, GPU and its memory, Python, host.
Runs inside trial children: standard library and torch only."""
from __future__ import annotations

import platform
import shutil
import socket
import subprocess


def collect_env() -> dict:
    """Provenance of the running process, stored with every trial record (runs inside trial children too):
    torch and its git version, CUDA, driver, the GPU in use and its memory, Python, host."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device()) if torch.cuda.is_available() else None
    return {
        "torch": str(torch.__version__),  # a TorchVersion (str subclass) would not survive a plain unpickler
        "torch_git": getattr(torch.version, "git_version", None),
        "cuda": torch.version.cuda,
        "driver": driver_version() if props else None,
        "gpu": props.name if props else None,
        "gpu_memory": int(props.total_memory) if props else None,
        "python": platform.python_version(),
        "host": socket.gethostname(),
    }


def driver_version() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip().splitlines()[0].strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        import pynvml  # optional: present in many CUDA environments
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        return None
