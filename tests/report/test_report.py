import struct
from dataclasses import replace

from matplotlib.figure import Figure
from rich.console import Console
from decide.test_select import ES, MS, RP, rec, setting
from folders import new_folder

from alloctune.decide.choice import choose
from alloctune.decide.reasons import Code, Reason
from alloctune.decide.speed import Confirmation, DriverSeconds, SpeedPrediction
from alloctune.decide.summary import summarize_settings
from alloctune.report.analysis import choice_record
from alloctune.report.plot import plot_pareto
from alloctune.report.ranked import print_choice
from alloctune.report.summary import write_summary
from alloctune.results.names import SUMMARY_FILE
from alloctune.results.folder import ResultsFolder, Skipped, SweepInfo
from alloctune.results.records import DriverWork, TrialState
from alloctune.units import GiB

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def measured_records(**kw):
    return (setting("", **kw) + setting(ES, reserved=10.5, tputs=(99.0, 100.0, 101.0), **kw)
            + setting(MS, reserved=20.0, tputs=(120.0, 121.0, 119.0), **kw)
            + [rec(RP, 0, state=TrialState.OOM, error="CUDA out of memory", **kw),
               rec(RP, 1, reserved=9.0, **kw)])


def info(**kw):
    base = dict(workload_name="w", workload_hash="h1", workload={}, grid=["", ES, MS, RP], repeats=3,
                command="alloctune sweep workloads/w.yaml --repeats 3", budget_bytes=24 * GiB,
                skipped=[Skipped("garbage_collection_threshold:0.6,expandable_segments:True",
                                 "known upstream bug (#123548)", "torch-2.11.0")],
                envs={"torch-2.11.0": {"python": "3.11.7", "driver": "580.1", "cuda": "13.0",
                                       "gpu_memory_bytes": 143771 * 2**20, "accepted": {"x": 1}}})
    base.update(kw)
    return SweepInfo(**base)


def decided(settings):
    """The records the reports are written from."""
    return [choice_record(c) for c in choose(settings)]


def render(choice) -> str:
    console = Console(record=True, width=300)
    print_choice(console, choice)
    return console.export_text()


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    return struct.unpack(">II", data[16:24])


def test_ranked_table_renders_ranked_rows():
    settings = summarize_settings(measured_records())
    [choice] = decided(settings)
    text = render(choice)
    for column in ("setting", "state", "reserved", "res/", "tokens", "vs"):
        assert column in text
    lines = [line for line in text.splitlines() if ("GiB" in line or "oom" in line) and not line.startswith("  ")]
    order = [next(c for c in (ES, "default", MS, RP) if c in line) for line in lines]
    assert order == [ES, "default", MS, RP]
    assert f"{ES} " in lines[0] and " best " in lines[0]
    assert "baseline" in text and "oom 1/2" in text and "10.50 GiB" in text and "1.05" in text
    assert " · measured" in text.splitlines()[0] and "cuda" not in text.splitlines()[0]   # what, not the backend
    assert "1.00x ±" in text and " n.s." in text and "n.s. = no significant difference" in text


def test_summary_written_with_every_section(tmp_path):
    records = measured_records()
    for i, r in enumerate(records):
        object.__setattr__(r, "started_at", f"2025-01-01T00:00:0{i % 10}Z")
    settings = summarize_settings(records)
    choices = decided(settings)
    folder = new_folder(tmp_path / "w-20250101-000000", info())
    path = write_summary(folder, info(), settings, choices)
    assert path == folder.path / SUMMARY_FILE
    text = path.read_text()
    assert text.startswith("# alloctune: w")
    assert f"**Recommended:** `PYTORCH_CUDA_ALLOC_CONF={ES}`" in text
    assert "saves 4.50 GiB" in text                                   # the reasons
    assert "| setting | state | peak reserved |" in text               # the Markdown table
    assert "Runners-up and what they cost" in text and f"- `{MS}`: raises peak reserved" in text
    assert "known upstream bug (#123548)" in text                      # skipped settings
    assert "gpu: NVIDIA H200" in text and "torch: 2.11.0+cu130" in text and "driver: 580.1" in text
    assert "gpu_memory_bytes: 140.40 GiB" in text and "accepted" not in text
    assert "2025-01-01T00:00:00Z to 2025-01-01T00:00:09Z" in text
    assert "`alloctune sweep workloads/w.yaml --repeats 3`" in text
    assert "repeats per setting: 3" in text and "memory budget: 24.00 GiB" in text
    assert "Welch" in text and "alpha = 0.05" in text and "max slowdown (2%" in text and "t-interval" in text


def test_a_ratio_whose_medians_point_the_other_way_is_marked_in_the_table_and_in_summary_md(tmp_path):
    """Paired, the ratio is the mean of each round's ratio (1.03, 0.91, 1.05: 0.997x); the medians are of all runs
    (101 against 100 tokens/s). Beside them the ratio is marked and the mark explained, in the terminal's table and
    in summary.md's, which one builder makes; a ratio that agrees with its medians is not marked."""
    records = (setting("", tputs=(100.0, 104.0, 96.0)) + setting(ES, reserved=10.5, tputs=(103.0, 95.0, 101.0))
               + setting(MS, reserved=20.0, tputs=(90.0, 92.0, 91.0)))
    settings = summarize_settings(records)
    [choice] = decided(settings)
    text = render(choice)
    rows = {c: next(line for line in text.splitlines() if line.startswith(f" {c} ")) for c in (ES, MS)}
    assert " 101 " in rows[ES] and "x† ±" in rows[ES] and " n.s." in rows[ES]
    assert "†" not in rows[MS] and " 91 " in rows[MS] and "0.91x ±" in rows[MS]
    assert "† = the medians beside it point the other way" in " ".join(text.split())
    folder = new_folder(tmp_path / "w-20250101-000000", info())
    summary = write_summary(folder, info(), settings, [choice]).read_text()
    [row] = [line for line in summary.splitlines() if line.startswith(f"| {ES} (best) |")]
    assert "| 101 tokens/s [" in row and "x† ±" in row and " no significant difference |" in row
    assert "\n† = the medians beside it point the other way: " in summary
    assert summary.count("†") == 2


def test_summary_simulated_and_nothing_fits(tmp_path):
    sim = setting("", backend="sim") + setting(ES, reserved=10.0, backend="sim")
    nothing = [rec("", state=TrialState.OOM, env_id="torch-2.9.1", torch="2.9.1"),
               rec(ES, state=TrialState.CRASHED, env_id="torch-2.9.1", torch="2.9.1", error="Segmentation fault")]
    settings = summarize_settings(sim + nothing)
    choices = decided(settings)
    folder = ResultsFolder(tmp_path / "r")
    text = write_summary(folder, info(backend="sim", budget_bytes=None, skipped=[]), settings, choices).read_text()
    assert "Replayed from a trace recorded on NVIDIA H200 with torch 2.11.0+cu130" in text
    assert "**Nothing fits**" in text and "Segmentation fault" in text
    assert "### torch-2.9.1" in text and "### torch-2.11.0" in text
    assert "Skipped settings" not in text and "memory budget: none" in text




def test_a_replayed_group_says_replayed_in_its_titles_its_plot_and_its_reasons(tmp_path, monkeypatch):
    """A sweep that only replays titles its group (summary.md, the text's table, the plot's panel and axis)
    'replayed', the basis every --json gives its figures, and a dry run's 'dry run', its figures replayed from the
    dry run's trace: no title, axis or reason calls a replayed figure 'simulated' or 'predicted'."""
    drawn = []

    class Kept(Figure):   # the plot's figure, kept to read its title and axis
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            drawn.append(self)

    monkeypatch.setattr("alloctune.report.plot.Figure", Kept)
    dry = {"dry_run": {"arch": "h100", "card": "NVIDIA H100 80GB HBM3", "table": "sm90"}}
    for kind, env, said in (("replayed", {}, "Replayed from a trace recorded on NVIDIA H200 with torch 2.11.0+cu130"),
                            ("dry run", dry, "Replayed from a dry run for NVIDIA H100 80GB HBM3 (table row sm90)")):
        records = [replace(r, env={**r.env, **env}) for r in setting("", backend="sim", env_id="sim:torch-2.11.0")
                   + setting(ES, reserved=10.0, backend="sim", env_id="sim:torch-2.11.0")]
        settings = summarize_settings(records)
        choices = decided(settings)
        title = f"w · sim:torch-2.11.0 · {kind}"
        summary = write_summary(ResultsFolder(tmp_path / kind), info(backend="sim", budget_bytes=None, skipped=[]),
                                settings, choices).read_text()
        assert f"## {title}\n" in summary and said in summary and "\n- replayed from a " in summary
        assert title in render(choices[0])
        plot_pareto(choices, tmp_path / f"{kind}.png")
        [ax] = drawn.pop().axes
        assert ax.get_title() == title and ax.get_xlabel().endswith(", replayed")
        assert not {"simulated", "predicted"} & set(summary.lower().replace(",", " ").split())


def test_plot_measured_simulated_and_several_envs(tmp_path):
    settings = summarize_settings(measured_records())
    one = plot_pareto(decided(settings), tmp_path / "one.png")
    w1, _ = png_size(one)

    two_envs = measured_records() + measured_records(env_id="torch-2.9.1", torch="2.9.1")
    settings = summarize_settings(two_envs)
    w2, _ = png_size(plot_pareto(decided(settings), tmp_path / "sub" / "two.png"))
    assert w2 > 1.5 * w1  # one panel per environment

    sim = summarize_settings(setting("", backend="sim") + setting(ES, reserved=10.0, backend="sim")
                             + [rec(MS, state=TrialState.OOM, backend="sim")])
    png_size(plot_pareto(decided(sim), tmp_path / "sim.png"))

    nothing = summarize_settings([rec("", state=TrialState.OOM)])
    png_size(plot_pareto(decided(nothing), tmp_path / "none.png"))
    png_size(plot_pareto([], tmp_path / "empty.png"))


def test_hybrid_summary_sets_predicted_beside_measured(tmp_path):
    predicted = setting("", reserved=15.3, backend="sim", env_id="sim:torch-2.11.0") + setting(
        ES, reserved=10.0, backend="sim", env_id="sim:torch-2.11.0")
    measured = setting("", reserved=15.0) + setting(ES, reserved=10.0)
    settings = summarize_settings(predicted + measured)
    folder = ResultsFolder(tmp_path / "r")
    text = write_summary(folder, info(backend="hybrid", skipped=[]), settings, decided(settings)).read_text()
    assert "## Replayed against measured (GPU)" in text
    assert "| default | 15.30 GiB | 15.00 GiB | +2.00% |" in text
    assert f"| {ES} | 10.00 GiB | 10.00 GiB | +0.00% |" in text
    only_measured = summarize_settings(measured)
    assert "Predicted" not in write_summary(folder, info(skipped=[]), only_measured, decided(only_measured)).read_text()


def test_an_in_process_winner_s_table_fits_80_columns():
    """The 'vs default' cell of a winner measured in blocks inside one process is a phrase ('1.00x ±0.3%, 8 blocks
    in one process'), too wide at 80 columns beside the figures even with the setting numbered: it wraps between
    words, so the table fits; each figure stays whole on its line."""
    settings = summarize_settings(setting("", reserved=19.46) + setting(ES, reserved=18.63))
    [choice] = decided(settings)
    pair = Reason(Code.CONFIRMED, Confirmation(1.0, 1.0, 0.0, 0.0, 0.003, 0.003, blocks=8)).record()
    none, no_time = DriverWork(steps=100), DriverSeconds(0.0, 0.0, 0.0, 0.0, 0.0)
    predicted = SpeedPrediction(none, none, 0.1, no_time, no_time, 0.1, 0.0).to_json()   # two columns more
    choice = replace(choice, reasons_data=(*choice.reasons_data, pair), predictions={"": predicted, ES: predicted})
    console = Console(record=True, width=80)
    print_choice(console, choice)
    text = console.export_text()
    assert max(map(len, text.splitlines())) <= 80, text
    assert "1.00x ±0.3%," in text and "blocks in one" in text and f"(1) {ES}" in text
