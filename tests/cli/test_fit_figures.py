"""What `alloctune fit`'s figures are, said as what they are: the peaks the curves are fitted to, replayed without a
memory limit (not what replay prints for a card); what a value needs, the least room it runs in as `replay
--min-memory` finds it (not the room max_split_size_mb fills under a limit), with the headroom and the copies at once
that rest on it; the plot's title, legend and limit lines; and the defaults its help and record's state."""
from __future__ import annotations

import json

from clirun import in_process
from scaled import CONTEXT, H200_BYTES

from alloctune.results.fits import FitFile
from alloctune.results.names import FIT_FILE
from alloctune.results.typed import load_json
from alloctune.sim.replay import replay
from alloctune.sim.trace import Trace, save_trace
from alloctune.units import GiB, MiB

MAX_SPLIT = "max_split_size_mb:128"
CARD = 8 * GiB


def growing(value: int) -> Trace:
    """1 GiB of weights, then ten blocks above max_split_size_mb:128, each larger than the last and freed before the
    next: none can reuse a cached one, so without a limit max_split_size_mb:128 caches them all, while under a limit
    it releases them as the room runs out, without an alloc retry."""
    kinds, addrs, sizes = [0], [0], [GiB]
    for k in range(10):
        kinds += [0, 1]
        addrs += [k + 1, k + 1]
        sizes += [value * (160 + 40 * k) * MiB] * 2
    return Trace(kinds, addrs, sizes, [0] * len(kinds),
                 meta={"torch_version": "2.11.0+cu130", "device_total_bytes": H200_BYTES, "overhead_bytes": CONTEXT})


def _traces(tmp_path) -> list[str]:
    out = []
    for value in (1, 2):
        save_trace(growing(value), tmp_path / f"job-{value}.xz")
        out.append(f"--trace={value}={tmp_path / f'job-{value}.xz'}")
    return out


def _run(*args) -> str:
    done = in_process(*map(str, args), env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def _least(path) -> int:
    """`replay --min-memory`'s smallest device without an OOM or an alloc retry, under max_split_size_mb:128."""
    [row] = [r for r in json.loads(_run("replay", path, "--conf", MAX_SPLIT, "--min-memory", "--json"))["results"]
             if r["conf"] == MAX_SPLIT]
    return row["min_memory_no_retry_bytes"]


def test_what_a_value_needs_is_the_least_room_it_runs_in_not_the_room_max_split_fills_under_a_limit(tmp_path):
    said = json.loads(_run("fit", "--param", "n", *_traces(tmp_path), "--conf", MAX_SPLIT, "--cards", CARD,
                           "--jobs", "1", "--json"))
    [limit] = said["limits"]
    answer = next(a for a in limit["answers"] if a["conf"] == MAX_SPLIT)
    assert (answer["largest"], answer["basis"]) == (2, "replayed")
    least = {v: _least(tmp_path / f"job-{v}.xz") for v in (1, 2)}
    under_card = replay(growing(2), MAX_SPLIT, CARD, jobs=1)[0].result
    # the replay on the card fills its room (what need said before), while it runs in far less
    assert under_card.num_alloc_retries == 0 and under_card.peak_reserved_bytes > least[2] + GiB
    assert answer["need_bytes"] == least[2] - CONTEXT
    assert answer["headroom_bytes"] == limit["capacity_bytes"] - answer["need_bytes"]
    # copies at once count each copy at its peak without a limit (another's cache is not its to take): at least one
    peaks = [p["unlimited_peak_reserved_bytes"] for s in said["settings"] if s["conf"] == MAX_SPLIT for p in s["points"]]
    assert answer["copies"] == [max(1, CARD // (peak + CONTEXT)) for peak in peaks]
    assert [p["least_room_bytes"] for s in said["settings"] if s["conf"] == MAX_SPLIT for p in s["points"]] == \
        [least[1] - CONTEXT, least[2] - CONTEXT]


def test_the_peaks_the_curves_are_fitted_to_are_said_to_be_replayed_without_a_memory_limit(tmp_path):
    traces = _traces(tmp_path)
    args = ("fit", "--param", "n", *traces, "--conf", MAX_SPLIT, "--cards", CARD, "--jobs", "1", "--out",
            tmp_path / "fit")
    text = " ".join(_run(*args).split())
    assert "Peak reserved (GiB), replayed without a memory limit at each recorded n, and its curve" in text
    said = json.loads(_run(*args, "--json"))
    [points] = [s["points"] for s in said["settings"] if s["conf"] == MAX_SPLIT]
    unlimited = replay(growing(2), MAX_SPLIT, 1 << 60, jobs=1)[0].result.peak_reserved_bytes
    on_card = json.loads(_run("replay", tmp_path / "job-2.xz", "--conf", MAX_SPLIT, "--device-memory", CARD,
                              "--json"))["results"]
    assert points[1]["unlimited_peak_reserved_bytes"] == unlimited
    assert unlimited > next(r["peak_reserved_bytes"] for r in on_card if r["conf"] == MAX_SPLIT) + GiB
    assert all("peak_reserved_bytes" not in p and "peak_allocated_bytes" not in p for p in points)
    stored = FitFile.from_json(load_json(tmp_path / "fit" / FIT_FILE), FIT_FILE)   # its stored names, read back
    assert stored.shared_json(said["simulated_torch"]) == said


def test_the_plot_says_what_is_replayed_and_predicted_and_tells_its_lines_apart(tmp_path):
    from alloctune.report.fits import fit_figure
    from alloctune.report.plot import plain_text

    _run("fit", "--param", "n", *_traces(tmp_path), "--conf", "default", "--cards", "8GiB,12GiB", "--budget", "4GiB",
         "--budget", "6GiB", "--jobs", "1", "--out", tmp_path / "fit")
    fit = FitFile.from_json(load_json(tmp_path / "fit" / FIT_FILE), FIT_FILE)
    with plain_text():
        [ax] = fit_figure(fit, "2.11").axes
    title = " ".join(ax.get_title(loc="left").split())
    assert "replayed without a memory limit with torch 2.11's allocator at each recorded n" in title
    assert "curve through them (predicted)" in title and "job-1.xz" in title and "job-2.xz" in title
    legend = {t.get_text() for t in ax.get_legend().get_texts()}
    assert "curve extrapolated, up to 2x the largest recorded (predicted)" in legend
    limits = [line for line in ax.get_lines() if "room" in line.get_label()]
    assert len(limits) == 4 and len({(line.get_color(), str(line.get_linestyle())) for line in limits}) == 4
    assert all(line.get_linestyle() != "--" for line in limits)   # dashed is an extrapolated curve's


def test_the_time_limits_help_states_their_defaults_and_records_output_says_its_formats():
    fit = " ".join(_run("fit", "--help").split())
    assert ("--timeout TIMEOUT time limit of each run, in seconds (default: none for a recording, 600 for a run that "
            "confirms an answer or copies at once)") in fit
    record = " ".join(_run("record", "--help").split())
    assert "time limit in seconds (default: a workload file's own, else 600; your own command: none)" in record
    assert "see replay --help" not in record
    assert ("NAME.pickle (or .pkl) for PyTorch's snapshot, which pytorch.org/memory_viz opens; any other name for "
            "alloctune's compact xz trace") in record
