"""What fits, on the GPU: the `fits` evidence job (issue 31).

    python3 scripts/jobs/fits_evidence.py OUT

1. `alloctune fleet` over the shipped traces (text and --json).
2. examples/hf_trainer_gpt2.py recorded at batch 8, 16 and 32 (`alloctune fit`, an 8-step window), then two budgets
   taken from the default's fitted curve at batch 28 and 44 (between and beyond the recorded values), and the
   predicted largest batch and the next one confirmed on the GPU under each, for the default and expandable
   segments; the answer for 24, 48 and 80 GiB cards from the same traces.
3. examples/gpt2_varlen.py fitted over sequence lengths 256-1024 (recorded, not confirmed).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

AT = [sys.executable, "-m", "alloctune"]
HF = [sys.executable, "examples/hf_trainer_gpt2.py", "--batch", "{batch}", "--log-every", "0"]


def run(argv: list[str], out: Path, name: str, timeout: float = 400) -> int:
    with open(out / f"{name}.txt", "w") as stdout, open(out / f"{name}.err", "w") as stderr:
        try:
            code = subprocess.run(argv, stdout=stdout, stderr=stderr, timeout=timeout, check=False).returncode
        except subprocess.TimeoutExpired:
            code = -1
    print(f"{name}: exit {code}", flush=True)
    return code


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    traces = sorted(str(p) for p in Path("workloads/traces").glob("*.xz"))
    run([*AT, "fleet", *traces], out, "fleet")
    run([*AT, "fleet", *traces, "--json"], out, "fleet-json")
    batch = ["--param", "batch=8,16,32", "--steps", "8", "--out", str(out / "batch")]
    if run([*AT, "fit", *batch, "--budget", "0.9", "--conf", "default", "--json", "--", *HF], out, "batch0") == 0:
        first = json.loads((out / "batch0.txt").read_text())
        coefficients = first["settings"][0]["reserved"]["coefficients"]
        budgets = [str(int(np.polyval(coefficients, b))) for b in (28, 44)]
        (out / "budgets.txt").write_text(" ".join(budgets) + "\n")
        run([*AT, "fit", *batch, "--budget", budgets[0], "--budget", budgets[1], "--confirm", "default",
             "--confirm", "expandable_segments:True", "--", *HF], out, "batch")
        run([*AT, "fit", "--param", "batch", *(f"--trace={v}={out}/batch/trace.batch-{v}.xz" for v in (8, 16, 32)),
             "--cards", "24GiB,48GiB,80GiB"], out, "batch-cards")
    run([*AT, "fit", "--param", "seq=256,512,768,1024", "--steps", "4", "--budget", "0.9", "--out", str(out / "seq"),
         "--", sys.executable, "examples/gpt2_varlen.py", "--layers", "12", "--d-model", "768", "--heads", "12",
         "--batch", "8", "8", "--seq-len", "{seq}", "{seq}", "--log-every", "0"], out, "seq", timeout=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
