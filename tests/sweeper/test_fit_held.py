"""A fit holds one trace at a time: each is loaded to be replayed and dropped after (its metadata kept), so that
a fit over many large recordings needs the memory of one. Counted where the replays start, with the real replays."""
from __future__ import annotations

import gc

import alloctune
from alloctune.sim.trace import Trace
from alloctune.sweeper import fitting
from scaled import write_traces


def test_each_trace_is_loaded_for_its_replays_alone(tmp_path, monkeypatch):
    live = []
    replay_value = fitting.replay_value

    def held() -> int:
        gc.collect()
        return sum(isinstance(o, Trace) for o in gc.get_objects())

    def counting(trace, *args, **kw):
        live.append(held() - before)   # traces other tests of this worker still hold are not the fit's
        return replay_value(trace, *args, **kw)

    monkeypatch.setattr(fitting, "replay_value", counting)
    traces = write_traces(tmp_path, [8, 16, 24, 32])
    paths = {int(a.partition("=")[0]): a.partition("=")[2] for a in traces[1::2]}
    before = held()
    result = alloctune.fit("batch", traces=paths, confs=["default"], cards=["24GiB"], jobs=1)
    assert result.fit.values == [8, 16, 24, 32] and live == [1, 1, 1, 1]
