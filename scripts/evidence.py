"""Run GPU evidence jobs on the device machine and pack what they wrote, as `docs/evidence.md` cites it.

    python3 scripts/evidence.py OUT JOB...         # from the repository root, on the GPU machine (Python >= 3.11)
    python3 scripts/evidence.py --list             # the jobs and what each is for

The jobs are data (`scripts/evidence_jobs.toml`): each one a list of steps (argv lists, each with its own time
limit), run one after another with `PYTHONPATH` at this checkout. A step's stdout and stderr go to
`OUT/work/JOB/STEP.log`; a step over its limit gets SIGINT (alloctune then stops its trials and writes what it has),
then SIGKILL 20 s later. After every step the whole of `OUT/work` is packed into `OUT/evidence-<jobs>.tgz`, so what
finished comes back even when the call itself is cut. `OUT/work/env.txt` records the machine, the GPU, the
packages and the commit (passed in `ALLOCTUNE_COMMIT`: the device's copy of the tree has no git metadata).

In a step's argv, `{res}` is the job's folder (`OUT/work/JOB`) and `{out}` is `OUT`. A step may name `env` (extra
variables) and `stdout` (a file under `{res}` that takes stdout instead of the log).
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOBS_FILE = Path(__file__).with_name("evidence_jobs.toml")
GRACE_S = 20   # after SIGINT, for alloctune to stop its trials and write its folder


def load_jobs(path: Path = JOBS_FILE) -> dict[str, dict]:
    jobs = tomllib.loads(path.read_text())["job"]
    for name, job in jobs.items():
        for step in job["steps"]:
            if not (isinstance(step.get("run"), list) and isinstance(step.get("limit_s"), int)):
                raise SystemExit(f"{path}: job {name!r}: every step needs run = [argv...] and limit_s = seconds")
    return jobs


def environment_facts(work: Path) -> None:
    probes = [
        ["date", "-u", "+%FT%TZ"],
        ["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader"],
        [sys.executable, "-c", "import sys, torch; print('python', sys.version.split()[0]); "
                               "print('torch', torch.__version__, 'cuda', torch.version.cuda, "
                               "'devices', torch.cuda.device_count())"],
        [sys.executable, "-m", "pip", "list", "--format=freeze"],
    ]
    with open(work / "env.txt", "w") as out:
        for argv in probes:
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            try:
                subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=60, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:   # a machine without nvidia-smi still gets its facts
                out.write(f"{exc}\n")
        out.write(f"alloctune commit {os.environ.get('ALLOCTUNE_COMMIT', 'unknown (set ALLOCTUNE_COMMIT)')}\n")


def run_step(step: dict, res: Path, out_dir: Path, log: Path) -> str:
    """Runs one step in its own process group within its limit; returns the line the index keeps."""
    argv = [arg.format(res=res, out=out_dir) for arg in step["run"]]
    env = {**os.environ, **{k: str(v).format(res=res, out=out_dir) for k, v in step.get("env", {}).items()}}
    stdout_path = res / step["stdout"] if "stdout" in step else log
    started = time.monotonic()
    with open(log, "a") as err, open(stdout_path, "a") as out:
        err.write(f"$ {' '.join(argv)}\n")
        err.flush()
        child = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=ROOT, start_new_session=True)
        try:
            code = child.wait(timeout=step["limit_s"])
        except (subprocess.TimeoutExpired, KeyboardInterrupt) as stopped:   # its limit, or the runner's own
            os.killpg(child.pid, signal.SIGINT)
            try:
                code = child.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                code = child.wait()
            if isinstance(stopped, KeyboardInterrupt):
                raise
    return f"{step.get('name', argv[0])} rc={code} wall={time.monotonic() - started:.0f}s limit={step['limit_s']}s"


def pack(work: Path, tarball: Path) -> None:
    partial = tarball.with_suffix(".part")
    with tarfile.open(partial, "w:gz") as tar:
        tar.add(work, arcname=".")
    partial.replace(tarball)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="folder for the logs, the results and the tarball")
    parser.add_argument("jobs", nargs="*", help="job names from scripts/evidence_jobs.toml, run in this order")
    parser.add_argument("--list", action="store_true", help="list the jobs and exit")
    args = parser.parse_args(argv)
    jobs = load_jobs()
    if args.list or args.out is None:
        for name, job in jobs.items():
            print(f"{name:<20} {job.get('about', '')}")
        return 0
    unknown = [j for j in args.jobs if j not in jobs]
    if unknown or not args.jobs:
        parser.error(f"unknown jobs {unknown}" if unknown else "name at least one job (--list shows them)")
    work = args.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    tarball = args.out / f"evidence-{'-'.join(args.jobs)}.tgz"
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    environment_facts(work)
    try:
        run_jobs(jobs, args.jobs, args.out, work, tarball)
    except KeyboardInterrupt:   # stopped from outside (a time limit): what finished still comes back
        pack(work, tarball)
        return 130
    return 0


def run_jobs(jobs: dict[str, dict], names: list[str], out: Path, work: Path, tarball: Path) -> None:
    with open(work / "index.txt", "a") as index:
        for name in names:
            res = work / name
            res.mkdir(exist_ok=True)
            for i, step in enumerate(jobs[name]["steps"]):
                line = run_step(step, res, out, res / f"{step.get('name', f'step{i}')}.log")
                index.write(f"{time.strftime('%H:%M:%S')} {name}: {line}\n")
                index.flush()
                print(f"{name}: {line}", flush=True)
                pack(work, tarball)


if __name__ == "__main__":
    sys.exit(main())
