"""The stand-in for a CUDA device (`fakecuda.cpp`: CUDA's device guard and the hooks the autograd engine asks for an
accelerator), built once per torch against that torch's own headers with the system's C++ compiler, kept in
alloctune's cache folder, and loaded into the process; on a CUDA build of torch, the GPUs hidden from CUDA itself
first (`hide_gpus`)."""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .refusal import Refused

SOURCE = Path(__file__).with_name("fakecuda.cpp")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "alloctune"


def library(torch) -> Path:
    """The built library for this torch (built now if not yet)."""
    root = Path(torch.__file__).parent
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))
    key = hashlib.sha256(SOURCE.read_bytes() + f"{torch.__version__} {root} {abi}".encode()).hexdigest()[:16]
    target = cache_dir() / f"fakecuda-{key}.so"
    if not target.exists():
        _build(root, abi, target)
    return target


def _build(root: Path, abi: int, target: Path) -> None:
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if compiler is None:
        raise Refused("a dry run builds a stand-in for the CUDA device against this torch once, and needs a C++ "
                      "compiler for it (g++ or clang++; none found)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / target.name
        argv = [compiler, "-O1", "-shared", "-fPIC", "-std=c++20", "-w", f"-I{root / 'include'}",
                f"-D_GLIBCXX_USE_CXX11_ABI={abi}", str(SOURCE), f"-L{root / 'lib'}", "-lc10", "-ltorch_cpu",
                f"-Wl,-rpath,{root / 'lib'}", "-o", str(built)]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise Refused(f"cannot build the stand-in for the CUDA device against torch at {root}: {last}")
        os.replace(built, target)


def install(torch) -> None:
    """Load the stand-in: from now on CUDA has a device guard and the accelerator is CUDA."""
    ctypes.CDLL(str(library(torch))).alloctune_fake_cuda()


def hide_gpus(torch) -> None:
    """Keep a dry run off any GPU the machine has. On a CUDA build of torch, CUDA is started now with every GPU hidden:
    the driver reads CUDA_VISIBLE_DEVICES once, when it starts, and torch keeps the device count it first got, so a
    program that sets the variable again (to pick its GPU) still sees none, and whatever reaches the CUDA runtime
    finds no device rather than using one. A CPU-only build has no CUDA to start."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if hasattr(torch._C, "_cuda_getDeviceCount"):   # how torch.cuda tells a CUDA build (ROCm's too)
        torch._C._cuda_getDeviceCount()
