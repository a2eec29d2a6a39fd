"""A calibration's lines fitted again to its own samples by today's rule (alloctune/trial/calibration.py's
`refitted`, as a sweep reads a stored one), for judging an older call's predictions by the rule that prices new
ones (runs anywhere):

    python3 scripts/jobs/refit_calibration.py OLD.json NEW.json
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from alloctune.results.calibration import read_calibration, write_calibration  # noqa: E402
from alloctune.trial.calibration import refitted  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: refit_calibration.py OLD.json NEW.json", file=sys.stderr)
        return 2
    write_calibration(Path(argv[1]), refitted(read_calibration(Path(argv[0]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
