"""Fit's answers from replays, confirmed on the GPU, and copies at once run together (issue 37, items 3 and 6): the
`fits-exact` evidence job.

    python3 scripts/jobs/fits_exact.py OUT [detection]    # detection: that fit alone
    python3 scripts/jobs/fits_exact.py OUT copies FOLDER  # step 2 alone, from a folder step 1 wrote (FOLDER/gpt2)

1. Two fits at once, each its own `alloctune fit` (their budgets keep both well within an 80 GiB card), each
   answering for the default and expandable segments under one budget, every answer's value and the next one
   recorded and replayed (`--extra-recordings 3`), and every answer confirmed on the GPU (`--confirm` both):
   - gpt2: examples/gpt2_train.py --batch {batch} (transformers GPT-2 small, 10 steps of 1024 tokens), recorded at
     2, 4, 6 (kept from tests/fixtures/fits, the same command's recordings, where this GPU and torch made them: an
     H100 with torch 2.11), under 20 GiB;
   - detection: examples/maskrcnn_train.py --batch {batch} {batch} --steps 8 (Mask R-CNN: each step draws its
     images' sizes and objects, so memory depends on the data), recorded at 2, 4, 6, under a budget taken from the
     default's curve at batch 9, between the values 8 and 10 (a first fit of the recordings alone, `--budget 0.9`).
2. Alone on the GPU (a ballast takes what the copies do not share): gpt2 again in its folder with
   `--confirm-copies 2`: its recordings and confirmations are kept, so only the copies at once run, under each
   setting.

OUT/<fit>/ is each fit's folder (fit.json, plot.png, the recordings), OUT/<fit>.txt its output, OUT/<fit>.err its
progress, OUT/runs.txt each fit's exit status and wall time, OUT/summary.md the table of every answer against the
GPU, made from the fit.json files.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
AT = [sys.executable, "-m", "alloctune"]
SETTINGS = ["--conf", "default", "--conf", "expandable_segments:True"]
CONFIRM = ["--confirm", "default", "--confirm", "expandable_segments:True", "--extra-recordings", "3",
           "--timeout", "150"]
GPT2 = [sys.executable, "examples/gpt2_train.py", "--batch", "{batch}"]
DETECTION = [sys.executable, "examples/maskrcnn_train.py", "--batch", "{batch}", "{batch}", "--steps", "8",
             "--log-every", "0"]
KEPT = {v: ROOT / "tests" / "fixtures" / "fits" / f"gpt2-h100-batch-{v}.xz" for v in (2, 4, 6)}


def fit(out: Path, name: str, args: list[str], command: list[str], log: str | None = None) -> int:
    """`alloctune fit ARGS --out OUT/name -- COMMAND`, its output in OUT/<log>.txt and .err; its exit status."""
    log = log or name
    started = time.monotonic()
    with open(out / f"{log}.txt", "w") as stdout, open(out / f"{log}.err", "w") as stderr:
        code = subprocess.run([*AT, "fit", "--param", "batch=2,4,6", *SETTINGS, *args, "--out", str(out / name),
                               "--", *command], stdout=stdout, stderr=stderr, cwd=ROOT, check=False).returncode
    with open(out / "runs.txt", "a") as runs:
        runs.write(f"{log}: exit {code}, {time.monotonic() - started:.0f} s\n")
    print(f"{log}: exit {code}", flush=True)
    return code


def keep_gpt2(out: Path) -> None:
    """The fixtures' recordings of gpt2, where this GPU and torch are the ones that made them."""
    from alloctune.sim.trace import load_trace

    meta = load_trace(KEPT[2]).meta
    here = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__, "
                           "torch.cuda.get_device_properties(0).total_memory)"], capture_output=True, text=True,
                          check=False).stdout.split()
    same = here == [meta["torch_version"], str(meta["device_total_bytes"])]
    if same:
        (out / "gpt2").mkdir(parents=True, exist_ok=True)
        for value, path in KEPT.items():
            shutil.copy(path, out / "gpt2" / f"trace.batch-{value}.xz")
    print(f"gpt2: {'kept' if same else 'records'} batch 2, 4, 6 (this GPU and torch: {' '.join(here)})", flush=True)


def detection(out: Path) -> int:
    """The recordings and a first fit of them, a budget from its default's curve at batch 9, then the fit."""
    if fit(out, "detection", ["--budget", "0.9", "--extra-recordings", "0", "--json"], DETECTION,
           "detection0") != 0:
        return 1
    [default] = [s for s in json.loads((out / "detection0.txt").read_text())["settings"]
                  if s["conf"] == "default"]   # fit --json names the default "default" (fit.json keeps "")
    budget = str(int(np.polyval(default["reserved"]["coefficients"], 9)))
    (out / "detection-budget.txt").write_text(budget + "\n")
    return fit(out, "detection", ["--budget", budget, *CONFIRM], DETECTION)


def summary(out: Path) -> str:
    """Every answer against the GPU, and the copies, from the fit.json files."""
    rows = ["| job | budget | setting | answer (from) | recorded to settle | GPU: value: runs? | agreed |",
            "|---|---|---|---|---|---|---|"]
    copies = ["| job | budget | setting | batch | copies predicted | ran together | peaks (GiB) | agreed |",
              "|---|---|---|---|---|---|---|---|"]
    for job in ("gpt2", "detection"):
        path = out / job / "fit.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        made = ", ".join(map(str, (data.get("exact") or {}).get("values", []))) or "-"
        for limit in data["limits"]:
            for a in limit["answers"]:
                mine = [c for c in limit["confirmed"] if c["conf"] == a["conf"]]
                gpu = ", ".join(f"{c['value']}: {'runs' if c['runs'] else c['state']}"
                                f"{' (search)' if c['searched'] else ''}" for c in mine)
                agreed = "/".join("-" if c["searched"] else "yes" if c["runs"] == c["predicted_runs"] else "NO"
                                  for c in mine)
                how = "replays" if a.get("exact") else \
                    f"{a.get('curve') or a['basis']} +{100 * (a.get('margin') or 0):.1f}%"   # fit.json schema 3
                rows.append(f"| {job} | {limit['budget']} | {a['conf'] or 'default'} | {a['largest']} ({how}) | "
                            f"{made} | {gpu} | {agreed} |")
            for c in limit.get("copies_confirmed", []):
                peaks = "/".join(f"{(r['peak_reserved_bytes'] or 0) / 2**30:.2f}" for r in c["runs"]) or "-"
                ran = f"{sum(r['runs'] for r in c['runs'])} of {len(c['runs'])}" if c["runs"] else c["error"]
                agreed = "-" if not c["runs"] else "yes" if all(r["runs"] for r in c["runs"]) else "NO"
                copies.append(f"| {job} | {limit['budget']} | {c['conf'] or 'default'} | {c['value']} | "
                              f"{c['predicted']} | {ran} | {peaks} | {agreed} |")
    return "\n".join(rows) + "\n\n" + "\n".join(copies) + "\n"


def write_summary(out: Path) -> None:
    """OUT/summary.md written and printed."""
    (out / "summary.md").write_text(summary(out))
    print((out / "summary.md").read_text(), flush=True)


def main() -> int:
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if sys.argv[2:3] == ["copies"]:   # step 2 alone: the fit's recordings and confirmations from an earlier run
        keep_gpt2(out)
        for path in (Path(sys.argv[3]) / "gpt2").iterdir():
            shutil.copy(path, out / "gpt2" / path.name)
        code = fit(out, "gpt2", ["--budget", "20GiB", *CONFIRM, "--confirm-copies", "2"], GPT2, "gpt2-copies")
        write_summary(out)
        return code
    if sys.argv[2:] == ["detection"]:   # the detection fit alone (its recordings may be in OUT/detection already)
        code = detection(out)
        write_summary(out)
        return code
    keep_gpt2(out)
    with ThreadPoolExecutor(2) as pool:
        at_once = [pool.submit(fit, out, "gpt2", ["--budget", "20GiB", *CONFIRM], GPT2), pool.submit(detection, out)]
        codes = [f.result() for f in at_once]
    if codes[0] == 0:   # alone on the GPU: the ballast takes what the copies do not share
        codes.append(fit(out, "gpt2", ["--budget", "20GiB", *CONFIRM, "--confirm-copies", "2"], GPT2, "gpt2-copies"))
    write_summary(out)
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
