"""A ballast on the GPU, run as `PYTHON -m alloctune.child.ballast LEAVE` under the command's interpreter: it holds
all of the device's free memory but LEAVE bytes, so that processes started next share LEAVE bytes as they would on a
smaller card (fit's copies at once, `trial/ballast.py`). Once it holds the memory it prints one line, MARK and the
bytes the driver reports free, and holds it until its standard input closes; where less than LEAVE is free, the
line says so instead. Standard library and torch only.
"""
from __future__ import annotations

import sys

MARK = "ALLOCTUNE-BALLAST "     # then the bytes left free
SHORT = "ALLOCTUNE-BALLAST-SHORT "   # then the bytes free, less than asked to leave
GRAIN = 2 * 2**20   # the caching allocator's large blocks are multiples of 2 MiB: what is left within one


def child_main(argv: list[str]) -> int:
    import torch

    leave = int(argv[0])
    held = []
    for _ in range(3):   # a block, then what rounding and the driver's own pages left over
        free, _total = torch.cuda.mem_get_info()
        if free < leave:
            print(SHORT + str(free), flush=True)
            return 1
        if free - leave < GRAIN:
            break
        held.append(torch.empty((free - leave) // GRAIN * GRAIN, dtype=torch.uint8, device="cuda"))
    print(MARK + str(torch.cuda.mem_get_info()[0]), flush=True)
    sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
