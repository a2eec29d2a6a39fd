"""Synthetic traces of one job at several values of a parameter, for `fit` on the CPU: weights held throughout,
activations whose sizes scale with the value (linearly, or with its square as attention scores do without a fused
kernel) and a temporary freed at once, over a few steps. Real traces come from the GPU (docs/fits.md says how to
record them); these exercise the fit and the answers where the expected figures are known."""
from __future__ import annotations

from pathlib import Path

from alloctune.sim.trace import Trace, save_trace
from alloctune.units import GiB, MiB

H200_BYTES = 150109880320   # an H200 as torch reports it: the recording GPU of the shipped traces
CONTEXT = 800 * MiB


def scaled_trace(value: int, *, per_unit: int = 8 * MiB, square: int = 0, weights: int = 2 * GiB,
                 steps: int = 4) -> Trace:
    """One job at `value`: 6 activations of value * per_unit (+ value² * square) bytes live per step."""
    kinds: list[int] = []
    addrs: list[int] = []
    sizes: list[int] = []

    def event(kind: int, addr: int, size: int) -> None:
        kinds.append(kind)
        addrs.append(addr)
        sizes.append(size)

    event(0, 0, weights)
    addr = 1
    for _ in range(steps):
        live = []
        for i in range(6):
            size = value * per_unit + value * value * square + 4096 * i
            event(0, addr, size)
            live.append((addr, size))
            addr += 1
        event(0, addr, 3 * MiB * value)
        event(1, addr, 3 * MiB * value)
        addr += 1
        for a, size in reversed(live):
            event(1, a, size)
    return Trace(kinds, addrs, sizes, [0] * len(kinds),
                 meta={"torch_version": "2.11.0+cu130", "device_total_bytes": H200_BYTES, "overhead_bytes": CONTEXT})


def write_traces(folder: Path, values, **kw) -> list[str]:
    """--trace VALUE=FILE arguments, one trace per value written in `folder`."""
    out = []
    for value in values:
        path = folder / f"job-{value}.xz"
        save_trace(scaled_trace(value, **kw), path)
        out += ["--trace", f"{value}={path}"]
    return out
