"""What fits, on the GPU: the `fits` evidence jobs (issue 31).

    python3 scripts/jobs/fits_evidence.py OUT PART [--kept DIR]

PART is one of:
- fleet: `alloctune fleet` over the shipped traces (text and --json);
- batch: examples/hf_trainer_gpt2.py recorded at batch 8, 16 and 32 (`alloctune fit`, an 8-step window), then two
  budgets taken from the default's fitted curve at batch 28 and 44 (between and beyond the recorded values), and the
  answers of the default and expandable segments confirmed on the GPU under each (the predicted largest batch, the
  next one, and where the GPU disagrees the search for its own answer); the answer for 24, 48 and 80 GiB cards from
  the same traces;
- seq: examples/gpt2_varlen.py (batch 8) over sequence lengths 256-1024 (a 4-step window, answered in steps of 128),
  confirmed in the same way under budgets from the default's curve at 896 and 1344.

--kept DIR: a folder holding `batch/` and `seq/` recordings of an earlier run (`trace.<param>-<value>.xz`), copied in
first, so that only the confirmations run on the GPU.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

AT = [sys.executable, "-m", "alloctune"]
HF = [sys.executable, "examples/hf_trainer_gpt2.py", "--batch", "{batch}", "--log-every", "0"]
SEQ = [sys.executable, "examples/gpt2_varlen.py", "--layers", "12", "--d-model", "768", "--heads", "12",
       "--batch", "8", "8", "--seq-len", "{seq}", "{seq}", "--log-every", "0"]
# part -> (--param, the window, the spacing answered, the default's curve values the two budgets come from, command)
FITS = {"batch": ("batch=8,16,32", 8, None, (28, 44), HF),
        "seq": ("seq=256,512,768,1024", 4, 128, (896, 1344), SEQ)}


def run(argv: list[str], out: Path, name: str, timeout: float = 400) -> int:
    with open(out / f"{name}.txt", "w") as stdout, open(out / f"{name}.err", "w") as stderr:
        try:
            code = subprocess.run(argv, stdout=stdout, stderr=stderr, timeout=timeout, check=False).returncode
        except subprocess.TimeoutExpired:
            code = -1
    print(f"{name}: exit {code}", flush=True)
    return code


def fleet(out: Path) -> None:
    traces = sorted(str(p) for p in Path("workloads/traces").glob("*.xz"))
    run([*AT, "fleet", *traces], out, "fleet")
    run([*AT, "fleet", *traces, "--json"], out, "fleet-json")


def fitted(out: Path, part: str) -> None:
    """Record (or keep), take two budgets from the default's curve, confirm the default and expandable segments."""
    param, window, step, at, command = FITS[part]
    name = param.partition("=")[0]
    spacing = ["--step", str(step)] if step else []
    common = ["--param", param, "--steps", str(window), "--out", str(out / part), *spacing]
    if run([*AT, "fit", *common, "--budget", "0.9", "--conf", "default", "--json", "--", *command], out,
           f"{part}0") != 0:
        return
    coefficients = json.loads((out / f"{part}0.txt").read_text())["settings"][0]["reserved"]["coefficients"]
    budgets = [str(int(np.polyval(coefficients, v))) for v in at]
    (out / f"{part}-budgets.txt").write_text(" ".join(budgets) + "\n")
    run([*AT, "fit", *common, "--budget", budgets[0], "--budget", budgets[1], "--confirm", "default",
         "--confirm", "expandable_segments:True", "--", *command], out, part, timeout=540)
    traces = [f"--trace={v}={out}/{part}/trace.{name}-{v}.xz" for v in param.partition("=")[2].split(",")]
    run([*AT, "fit", "--param", name, *traces, *spacing, "--cards", "24GiB,48GiB,80GiB"], out, f"{part}-cards")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("part", choices=["fleet", *FITS])
    parser.add_argument("--kept", type=Path, help="a folder with batch/ and seq/ recordings to keep")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.part == "fleet":
        fleet(args.out)
        return 0
    if args.kept is not None:
        (args.out / args.part).mkdir(exist_ok=True)
        for trace in (args.kept / args.part).glob("trace.*.xz"):
            shutil.copy(trace, args.out / args.part / trace.name)
    fitted(args.out, args.part)
    return 0


if __name__ == "__main__":
    sys.exit(main())
