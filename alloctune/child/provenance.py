"""Provenance of a trial process: torch and its git version, CUDA, driver, GPU and its memory, Python, host, and the
host's CPU. Runs inside trial children: standard library and torch only."""
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


def host_cpu(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The host's CPU model: the first "model name" of `cpuinfo`; on an ARM host, whose cpuinfo has none, its
    first core's implementer and part (a Grace CPU: "ARM implementer 0x41 part 0xd4f"); else what `platform` knows,
    else None. A driver call's cost moves with it: two H100 machines of one driver and torch priced every call about
    2 times apart (results/h100-speed-model-v-2026-12-06)."""
    first: dict[str, str] = {}
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
                first.setdefault(key.strip(), value.strip())
    except OSError:   # not Linux
        pass
    if first.get("CPU implementer") and first.get("CPU part"):
        return f"ARM implementer {first['CPU implementer']} part {first['CPU part']}"
    return platform.processor() or None
