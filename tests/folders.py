"""Real results folders for the export and compare tests: sweep.json as a sweep writes it (`new_folder`) + TrialRecords
through the store."""
from __future__ import annotations

from alloctune.results.choices import ChoiceRecord
from alloctune.results.figures import SettingFigures, Summary
from alloctune.results.folder import ResultsFolder, Skipped, SweepInfo
from alloctune.results.records import Measurement, TrialRecord, TrialState
from alloctune.units import GiB

GPU = "NVIDIA H200"


def trial(conf="", repeat=0, reserved=15.0, allocated=10.0, tput=100.0, state=TrialState.OK,
          env_id="torch-2.11.0", backend="cuda", workload="w", whash="h1", budget=None,
          torch="2.11.0+cu130") -> TrialRecord:
    """One trial; sizes in GiB. `tput=None` for a replay (no throughput)."""
    m = None
    if state is TrialState.OK:
        m = Measurement(peak_reserved_bytes=int(reserved * GiB), peak_allocated_bytes=int(allocated * GiB),
                        throughput=tput, unit="tokens" if tput else None)
    return TrialRecord(workload=workload, workload_hash=whash, conf=conf, repeat=repeat, env_id=env_id,
                       backend=backend, state=state, measurement=m, budget_bytes=budget,
                       error=None if state is TrialState.OK else f"{state.value} in the test",
                       env={"torch": torch, "gpu": GPU})


def repeats(conf, tputs=(100.0, 101.0, 99.0), **kw) -> list[TrialRecord]:
    return [trial(conf, i, tput=t, **kw) for i, t in enumerate(tputs)]


def choice(conf, env_id="torch-2.11.0", backend="cuda", torch="2.11.0+cu130", budget=None) -> ChoiceRecord:
    """A choice.json entry as report.analysis writes it, sentences only (conf None = nothing fits), with the
    figures of the winner and the default."""
    reason = f"{conf or 'default'} has the lowest peak reserved"
    peaks = {} if conf is None else {conf: 10.0, "": 15.0 if conf else 10.0}   # GiB
    settings = [SettingFigures(c, repeats=3, memory=int(peak * GiB), peak_reserved_bytes=int(peak * GiB),
                               peak_allocated_bytes=10 * GiB, throughput=Summary(3, 100.0, 99.0, 101.0))
                for c, peak in peaks.items()]
    return ChoiceRecord(workload="w", env_id=env_id, backend=backend, budget_bytes=budget, conf=conf,
                        torch_version=torch, env={"torch": torch, "gpu": GPU}, settings=tuple(settings),
                        decision=reason, reasons=(reason,))


def new_folder(path, info: SweepInfo) -> ResultsFolder:
    """A results folder holding `info` only, as a sweep's first step leaves it (`sweeper.resume.open_folder`)."""
    folder = ResultsFolder(path)
    folder.path.mkdir(parents=True, exist_ok=True)
    folder.write_info(info)
    return folder


def make_folder(path, records, choices=None, skipped=(), workload="w", whash="h1", envs=None) -> ResultsFolder:
    """A results folder holding `records`; choice.json only when `choices` is given (a finished sweep)."""
    envs = envs if envs is not None else {r.env_id: {"torch": r.env["torch"], "gpu": GPU} for r in records}
    info = SweepInfo(workload_name=workload, workload_hash=whash, workload={"name": workload},
                     grid=sorted({r.conf for r in records}), skipped=[Skipped(*s) for s in skipped], envs=envs,
                     repeats=3, created_at="2026-01-02T03:04:05Z", command="alloctune sweep w.yaml")
    folder = new_folder(path, info)
    for record in records:
        folder.store.append(record)
    if choices is not None:
        folder.write_choice(choices)
    return folder
