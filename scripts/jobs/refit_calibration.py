"""A calibration's lines fitted again from its own samples by today's `fit` (alloctune/child/calibration.py), for
judging an older call's predictions by the rule that prices new ones (runs anywhere):

    python3 scripts/jobs/refit_calibration.py OLD.json NEW.json

Each kind's idle and busy line is refitted; the samples, the share waited for and everything else are kept.
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from alloctune.child.calibration import fit  # noqa: E402
from alloctune.results.calibration import CostFit, read_calibration, write_calibration  # noqa: E402


def refit(kind: CostFit) -> CostFit:
    line = fit(kind.samples)
    busy = kind.busy
    if busy is not None:
        again = fit(busy.samples)
        busy = replace(busy, fixed_us=again.fixed_us, per_mib_us=again.per_mib_us)
    return replace(kind, fixed_us=line.fixed_us, per_mib_us=line.per_mib_us, busy=busy)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.splitlines()[3].strip(), file=sys.stderr)
        return 2
    cal = read_calibration(Path(argv[0]))
    write_calibration(Path(argv[1]), replace(cal, **{k: refit(getattr(cal, k))
                                                   for k in ("device_alloc", "device_free", "map", "unmap")}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
