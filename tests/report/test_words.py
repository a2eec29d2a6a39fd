"""The reasons in words: every sentence the reports print today, pinned whole (the scenarios reach every reason
code), said from the reasons' figures alone, also once they have been through choice.json."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from alloctune.decide.choice import choose
from alloctune.decide.precision import precision_of
from alloctune.decide.reasons import Code, Reason
from alloctune.decide.quoted import BackendSkipped, DryRunCard, Stop, Unmeasured
from alloctune.decide.summary import MemoryMeasure, summarize_settings
from alloctune.report.analysis import choice_record
from alloctune.report.words import sentence
from alloctune.results.choices import ReasonRecord
from alloctune.results.records import Measurement, TrialRecord, TrialState
from alloctune.units import GiB, MiB

ES = "expandable_segments:True"
MS = "max_split_size_mb:128"
RP = "roundup_power2_divisions:4"
GC = "garbage_collection_threshold:0.6"
ASYNC = "backend:cudaMallocAsync"
BASE = (100.0, 100.5, 99.5)


def rec(conf="", repeat=0, reserved=15.0, tput=100.0, state=TrialState.OK, backend="cuda", budget=None, retries=0,
        error=None, device=None, ratio=True, card=None, features=None, growth=None):
    m = None
    if state is TrialState.OK:
        m = Measurement(peak_reserved_bytes=int(reserved * GiB), peak_allocated_bytes=int(10 * GiB) if ratio else 0,
                        device_peak_used_bytes=None if device is None else int(device * GiB),
                        num_alloc_retries=retries, throughput=None if backend == "sim" else tput, unit="tokens",
                        growth_samples=growth)
    return TrialRecord(workload="w", workload_hash="h1", conf=conf, repeat=repeat, env_id="torch-2.11.0",
                       backend=backend, state=state, measurement=m, budget_bytes=budget, error=error,
                       env={"torch": "2.11.0+cu130", **({"gpu_memory": int(card * GiB)} if card else {})},
                       features=features)


def setting(conf, tputs=BASE, **kw):
    return [rec(conf, i, tput=t, **kw) for i, t in enumerate(tputs)]


def moving(conf, peaks, **kw):
    return [rec(conf, i, reserved=r, tput=t, **kw) for i, (r, t) in enumerate(zip(peaks, BASE))]


def samples(at_k, at_2k, allocated=8.0, k=50):
    """Growth samples at steps k and 2k: reserved (GiB) at each, allocated flat."""
    return [[k, int(at_k * GiB), int(allocated * GiB)], [2 * k, int(at_2k * GiB), int(allocated * GiB)]]


IPC, CHANGE = ["cuda_ipc"], ["runtime_allocator_change"]


SCENARIOS = {
    "saves memory, runners-up cost more or raise it": (
        setting("") + setting(ES, reserved=10.5) + setting(MS, reserved=20.0, tputs=(120, 121, 119))
        + setting(RP, reserved=12.0), 0.02),
    "a small gain, the simpler wins a tie, a lower peak and a name decide others": (
        setting("") + setting(ES, reserved=14.0) + setting(f"{ES},{RP}", reserved=13.95)
        + setting(MS, reserved=14.02) + setting(RP, reserved=14.04), 0.02),
    "ties are not transitive: within the winner's tie but out of the lowest's": (
        setting("") + setting(ES, reserved=10.46) + setting(f"{ES},{RP}", reserved=10.36)
        + setting(f"{ES},{RP},{MS}", reserved=10.30), 0.02),
    "equal in every rule": (setting("") + setting(MS, reserved=12.0) + setting(RP, reserved=12.0), 0.02),
    "too slow, and one repeat is not tested": (
        [rec(""), rec(ES, reserved=10.0, tput=90.0), rec(RP, reserved=12.0, tput=99.0)], 0.02),
    "refused as too slow": (setting("") + setting(ES, reserved=8.0, tputs=(90.0, 90.5, 89.5))
                            + setting(RP, reserved=12.0), 0.02),
    "significantly slower, inside the allowance": (
        setting("") + setting(ES, reserved=8.0, tputs=(90.0, 90.5, 89.5)), 0.15),
    "significantly faster": (setting("") + setting(ES, reserved=8.0, tputs=(110.0, 110.6, 109.4)), 0.02),
    "a negligible difference": (setting("") + setting(ES, reserved=8.0, tputs=(99.5, 100.0, 99.0)), 0.02),
    "keep the default, lower ones refused": (
        setting("") + setting(ES, reserved=8.0, tputs=(80.0, 80.5, 79.5)) + setting(MS, reserved=14.95)
        + setting(RP, reserved=18.0), 0.02),
    "keep the default alone": (setting("") + setting(MS, reserved=18.0), 0.02),
    "failures of every kind": (
        setting("") + setting(ES, reserved=12.0)
        + [rec(MS, 0, reserved=5.0), rec(MS, 1, state=TrialState.OOM, error="CUDA out of memory", budget=None)]
        + [rec(RP, 0, state=TrialState.CRASHED, error="Traceback\nRuntimeError: boom\n")]
        + [rec(GC, 0, state=TrialState.TIMEOUT, error="killed after 60 s"),
           rec(GC, 1, state=TrialState.MISMATCH, error="effective: expandable_segments:False")], 0.02),
    "the default does not fit under the budget": (
        [rec("", i, state=TrialState.OOM, budget=16 * GiB, error="CUDA out of memory") for i in range(2)]
        + setting(ES, reserved=12.0, budget=16 * GiB, tputs=(100.0, 101.0))
        + setting(RP, reserved=14.0, budget=16 * GiB, tputs=(100.0, 101.0)), 0.02),
    "nothing fits": (
        [rec("", state=TrialState.OOM, budget=GiB), rec(ES, state=TrialState.OOM, budget=GiB),
         rec(MS, state=TrialState.TIMEOUT, budget=GiB, error="killed after 60 s")], 0.02),
    "simulated, more retries refused": (
        setting("", backend="sim") + setting(ES, reserved=9.0, retries=3, backend="sim")
        + setting(RP, reserved=11.0, backend="sim") + setting(MS, reserved=10.0, retries=1, backend="sim"), 0.02),
    "simulated, fewer retries": (
        setting("", backend="sim", retries=2) + setting(ES, reserved=9.0, retries=1, backend="sim"), 0.02),
    "backends differ: device memory, a native setting wins the tie": (
        setting("", reserved=40.0, device=41.0) + setting(ES, reserved=32.68, device=33.50)
        + setting(ASYNC, reserved=32.59, device=33.40), 0.02),
    "device memory contaminated in one repeat, moved in another": (
        setting("", reserved=40.0, device=41.0)
        + [rec(ES, i, reserved=28.0, device=d, tput=t) for i, (d, t) in enumerate(zip((64.0, 28.8, 29.4), BASE))]
        + setting(ASYNC, reserved=31.0, device=31.8), 0.02),
    "a moving peak loses the tie": (
        setting("") + setting(ES, reserved=10.50) + moving(RP, (10.40, 10.45, 10.40)), 0.02),
    "a moving peak alone wins, with a caution": (setting("") + moving(RP, (10.40, 10.45, 10.40)), 0.02),
    "no default in the group": (setting(ES, reserved=10.0) + setting(MS, reserved=12.0), 0.02),
    "no throughput on the default's side": (
        setting("", tputs=(None, None, None)) + setting(ES, reserved=10.0), 0.02),
    "no reserved/allocated figure": (setting("", ratio=False) + setting(ES, reserved=10.0, ratio=False), 0.02),
    "settings that take the whole card": (
        setting("", card=24.0) + setting(ES, reserved=12.0, card=24.0) + setting(MS, reserved=23.5, card=24.0)
        + setting(RP, reserved=22.9, card=24.0), 0.02),   # 1.1 GiB short of the card: not all of it
    "one setting takes the whole card, 1% of a large one": (
        setting("", card=139.8) + setting(MS, reserved=138.5, card=139.8), 0.02),
    "a known problem for what the job used refuses, another only warns": (
        setting("", features=IPC + CHANGE) + setting(ES, reserved=9.0, state=TrialState.CRASHED,
                                                     error="RuntimeError: pidfd_getfd: Operation not permitted")
        + setting(RP, reserved=12.0, features=CHANGE), 0.02),
    "the growth check refuses a growing setting, the winner is steady": (
        setting("", growth=samples(15.0, 15.0)) + setting(ES, reserved=9.0, growth=samples(9.0, 12.0))
        + setting(RP, reserved=12.0, growth=samples(12.0, 12.1)), 0.02),
    "the default grows, the others raise memory": (
        setting("", growth=samples(12.0, 14.0)) + setting(RP, reserved=18.0, growth=samples(18.0, 18.0)), 0.02),
    "the growth check could not decide": (setting("", growth=[]) + setting(ES, reserved=10.0, growth=[]), 0.02),
}


EXPECTED = {'saves memory, runners-up cost more or raise it': (["peak reserved 10.50 GiB against the default's 15.00 GiB "
                                                     '(-30.0%, saves 4.50 GiB); reserved/allocated 1.05 against '
                                                     '1.50',
                                                     "throughput 1.000x the default's (median 100 tokens/s against "
                                                     '100 tokens/s): no significant difference (paired t-test over '
                                                     '3 rounds, p = 1; 95% interval 1.000-1.000x, ±0.0%)'],
                                                    [('roundup_power2_divisions:4',
                                                      'costs 1.50 GiB more peak reserved than the winner (+14.3%); '
                                                      "throughput 1.000x the default's (no significant "
                                                      'difference)'),
                                                     ('',
                                                      'costs 4.50 GiB more peak reserved than the winner (+42.9%)'),
                                                     ('max_split_size_mb:128',
                                                      'raises peak reserved to 20.00 GiB (+33.3% against the '
                                                      "default's 15.00 GiB)")]),
 'a small gain, the simpler wins a tie, a lower peak and a name decide others': (['peak reserved 14.00 GiB against '
                                                                                  "the default's 15.00 GiB (-6.7%, "
                                                                                  'saves 1.00 GiB); '
                                                                                  'reserved/allocated 1.40 against '
                                                                                  '1.50. A small gain: the default '
                                                                                  'is within 10% of it, so keeping '
                                                                                  'the default is sound too',
                                                                                  "throughput 1.000x the default's "
                                                                                  '(median 100 tokens/s against '
                                                                                  '100 tokens/s): no significant '
                                                                                  'difference (paired t-test over '
                                                                                  '3 rounds, p = 1; 95% interval '
                                                                                  '1.000-1.000x, ±0.0%)',
                                                                                  'expandable_segments:True,roundup_power2_divisions:4 '
                                                                                  'came within 1% of its peak '
                                                                                  'reserved (13.95 GiB, -0.4%); '
                                                                                  'expandable_segments:True wins '
                                                                                  'the tie as the simpler setting '
                                                                                  '(1 key against 2); '
                                                                                  'max_split_size_mb:128 came '
                                                                                  'within 1% of its peak reserved '
                                                                                  '(14.02 GiB, +0.1%); '
                                                                                  'expandable_segments:True wins '
                                                                                  'the tie with the lower peak; '
                                                                                  'roundup_power2_divisions:4 came '
                                                                                  'within 1% of its peak reserved '
                                                                                  '(14.04 GiB, +0.3%); '
                                                                                  'expandable_segments:True wins '
                                                                                  'the tie with the lower peak'],
                                                                                 [('expandable_segments:True,roundup_power2_divisions:4',
                                                                                   'ties with the winner on peak '
                                                                                   'reserved (13.95 GiB, -0.4%) '
                                                                                   'but loses the tie: it sets 2 '
                                                                                   'keys against 1; throughput '
                                                                                   "1.000x the default's (no "
                                                                                   'significant difference)'),
                                                                                  ('max_split_size_mb:128',
                                                                                   'ties with the winner on peak '
                                                                                   'reserved (14.02 GiB, +0.1%) '
                                                                                   'but loses the tie: the '
                                                                                   "winner's peak is lower; "
                                                                                   'throughput 1.000x the '
                                                                                   "default's (no significant "
                                                                                   'difference)'),
                                                                                  ('roundup_power2_divisions:4',
                                                                                   'ties with the winner on peak '
                                                                                   'reserved (14.04 GiB, +0.3%) '
                                                                                   'but loses the tie: the '
                                                                                   "winner's peak is lower; "
                                                                                   'throughput 1.000x the '
                                                                                   "default's (no significant "
                                                                                   'difference)'),
                                                                                  ('',
                                                                                   'costs 1.00 GiB more peak '
                                                                                   'reserved than the winner '
                                                                                   '(+7.1%)')]),
 'equal in every rule': (["peak reserved 12.00 GiB against the default's 15.00 GiB (-20.0%, saves 3.00 GiB); "
                          'reserved/allocated 1.20 against 1.50',
                          "throughput 1.000x the default's (median 100 tokens/s against 100 tokens/s): no "
                          'significant difference (paired t-test over 3 rounds, p = 1; 95% interval 1.000-1.000x, '
                          '±0.0%)',
                          'roundup_power2_divisions:4 came within 1% of its peak reserved (12.00 GiB, 0.0%); '
                          'max_split_size_mb:128 wins the tie (equal in every rule; by name)'],
                         [('roundup_power2_divisions:4',
                           'ties with the winner on peak reserved (12.00 GiB, 0.0%) but loses the tie: the same '
                           "peak; decided by name; throughput 1.000x the default's (no significant difference)"),
                          ('', 'costs 3.00 GiB more peak reserved than the winner (+25.0%)')]),
 'too slow, and one repeat is not tested': (["peak reserved 10.00 GiB against the default's 15.00 GiB (-33.3%, "
                                             'saves 5.00 GiB); reserved/allocated 1.00 against 1.50',
                                             "throughput 0.900x the default's (median 90 tokens/s against 100 "
                                             'tokens/s): NOT TESTED, one repeat cannot tell a difference from '
                                             'noise (fresh processes vary by several percent); confirm with '
                                             '--repeats 3 or more'],
                                            [('roundup_power2_divisions:4',
                                              'costs 2.00 GiB more peak reserved than the winner (+20.0%); '
                                              "throughput 0.990x the default's (not tested (too few repeats))"),
                                             ('', 'costs 5.00 GiB more peak reserved than the winner (+50.0%)')]),
 'refused as too slow': (["peak reserved 12.00 GiB against the default's 15.00 GiB (-20.0%, saves 3.00 GiB); "
                          'reserved/allocated 1.20 against 1.50',
                          "throughput 1.000x the default's (median 100 tokens/s against 100 tokens/s): no "
                          'significant difference (paired t-test over 3 rounds, p = 1; 95% interval 1.000-1.000x, '
                          '±0.0%)'],
                         [('expandable_segments:True',
                           'saves 7.00 GiB but is 10.0% slower than the default, significantly beyond the 2% '
                           'allowance (one-sided paired t-test over 3 rounds, p = 7.1e-06)'),
                          ('', 'costs 3.00 GiB more peak reserved than the winner (+25.0%)')]),
 'significantly slower, inside the allowance': (["peak reserved 8.00 GiB against the default's 15.00 GiB (-46.7%, "
                                                 'saves 7.00 GiB); reserved/allocated 0.80 against 1.50',
                                                 "throughput 0.900x the default's (median 90 tokens/s against 100 "
                                                 'tokens/s): significantly slower (paired t-test over 3 rounds, p '
                                                 '= 9.3e-06; 95% interval 0.899-0.901x, ±0.1%), inside the 15% '
                                                 'allowance'],
                                                [('',
                                                  'costs 7.00 GiB more peak reserved than the winner (+87.5%)')]),
 'significantly faster': (["peak reserved 8.00 GiB against the default's 15.00 GiB (-46.7%, saves 7.00 GiB); "
                           'reserved/allocated 0.80 against 1.50',
                           "throughput 1.100x the default's (median 110 tokens/s against 100 tokens/s): "
                           'significantly faster (paired t-test over 3 rounds, p = 7.6e-06; 95% interval '
                           '1.099-1.101x, ±0.1%)'],
                          [('', 'costs 7.00 GiB more peak reserved than the winner (+87.5%)')]),
 'a negligible difference': (["peak reserved 8.00 GiB against the default's 15.00 GiB (-46.7%, saves 7.00 GiB); "
                              'reserved/allocated 0.80 against 1.50',
                              "throughput 0.995x the default's (median 99.5 tokens/s against 100 tokens/s): "
                              'statistically detectable (paired t-test over 3 rounds, p = 8.4e-06; 95% interval '
                              '0.995-0.995x, ±0.0%) but under 1%: no practical difference'],
                             [('', 'costs 7.00 GiB more peak reserved than the winner (+87.5%)')]),
 'keep the default, lower ones refused': (["no setting lowers peak reserved by more than 1% below the default's "
                                           '15.00 GiB and meets the rules: keep the default (closest: '
                                           'max_split_size_mb:128 at 14.95 GiB, -0.3%)',
                                           '1 setting with less memory was refused: expandable_segments:True '
                                           'saves 7.00 GiB but is 20.0% slower than the default, significantly '
                                           'beyond the 2% allowance (one-sided paired t-test over 3 rounds, p = '
                                           '6.3e-06)'],
                                          [('expandable_segments:True',
                                            'saves 7.00 GiB but is 20.0% slower than the default, significantly '
                                            'beyond the 2% allowance (one-sided paired t-test over 3 rounds, p = '
                                            '6.3e-06)'),
                                           ('max_split_size_mb:128',
                                            'ties with the winner on peak reserved (14.95 GiB, -0.3%) but loses '
                                            "the tie: it sets 1 key against 0; throughput 1.000x the default's "
                                            '(no significant difference)'),
                                           ('roundup_power2_divisions:4',
                                            "raises peak reserved to 18.00 GiB (+20.0% against the default's 15.00 "
                                            'GiB)')]),
 'keep the default alone': (["no setting lowers peak reserved by more than 1% below the default's 15.00 GiB and "
                             'meets the rules: keep the default'],
                            [('max_split_size_mb:128',
                              "raises peak reserved to 18.00 GiB (+20.0% against the default's 15.00 GiB)")]),
 'failures of every kind': (["peak reserved 12.00 GiB against the default's 15.00 GiB (-20.0%, saves 3.00 GiB); "
                             'reserved/allocated 1.20 against 1.50',
                             "throughput 1.000x the default's (median 100 tokens/s against 100 tokens/s): no "
                             'significant difference (paired t-test over 3 rounds, p = 1; 95% interval '
                             '1.000-1.000x, ±0.0%)'],
                            [('', 'costs 3.00 GiB more peak reserved than the winner (+25.0%)'),
                             ('max_split_size_mb:128', 'does not fit: out of memory in 1 of 2 repeats'),
                             ('garbage_collection_threshold:0.6',
                              'the allocator settings that took effect differ from those asked for in 2 of 2 '
                              'repeats (killed after 60 s)'),
                             ('roundup_power2_divisions:4', 'crashed in 1 of 1 repeat (RuntimeError: boom)')]),
 'the default does not fit under the budget': (['the default does not fit: out of memory under the 16.00 GiB '
                                                'budget in 2 of 2 repeats; expandable_segments:True is the lowest '
                                                'peak reserved (12.00 GiB) of the 2 settings that fit'],
                                               [('roundup_power2_divisions:4',
                                                 'costs 2.00 GiB more peak reserved than the winner (+16.7%)'),
                                                ('',
                                                 'does not fit: out of memory under the 16.00 GiB budget in 2 of 2 '
                                                 'repeats')]),
 'nothing fits': (['nothing fits under the 1.00 GiB budget: all 3 settings failed (oom: 2, timeout: 1)'],
                  [('', 'does not fit: out of memory under the 1.00 GiB budget in 1 of 1 repeat'),
                   ('expandable_segments:True',
                    'does not fit: out of memory under the 1.00 GiB budget in 1 of 1 repeat'),
                   ('max_split_size_mb:128', 'timed out in 1 of 1 repeat (killed after 60 s)')]),
 'simulated, more retries refused': (['replayed from a recorded allocation trace: decided on memory alone (no '
                                      'throughput measured)',
                                      "peak reserved 11.00 GiB against the default's 15.00 GiB (-26.7%, saves 4.00 "
                                      'GiB); reserved/allocated 1.10 against 1.50',
                                      'needs no alloc retries, like the default'],
                                     [('expandable_segments:True',
                                       'needs 3 alloc retries where the default needs no alloc retries: each retry '
                                       'frees the cache and synchronises the device, a slowdown the replay cannot '
                                       'time'),
                                      ('max_split_size_mb:128',
                                       'needs 1 alloc retry where the default needs no alloc retries: each retry '
                                       'frees the cache and synchronises the device, a slowdown the replay cannot '
                                       'time'),
                                      ('', 'costs 4.00 GiB more peak reserved than the winner (+36.4%)')]),
 'simulated, fewer retries': (['replayed from a recorded allocation trace: decided on memory alone (no '
                               'throughput measured)',
                               "peak reserved 9.00 GiB against the default's 15.00 GiB (-40.0%, saves 6.00 GiB); "
                               'reserved/allocated 0.90 against 1.50',
                               "needs 1 alloc retry, fewer than the default's 2"],
                              [('', 'costs 6.00 GiB more peak reserved than the winner (+66.7%)')]),
 'backends differ: device memory, a native setting wins the tie': (["peak reserved 32.68 GiB against the default's "
                                                                    '40.00 GiB (-18.3%, saves 7.32 GiB); '
                                                                    'reserved/allocated 3.27 against 4.00',
                                                                    "throughput 1.000x the default's (median 100 "
                                                                    'tokens/s against 100 tokens/s): no significant '
                                                                    'difference (paired t-test over 3 rounds, p = 1; '
                                                                    '95% interval 1.000-1.000x, ±0.0%)',
                                                                    'memory compared as peak device memory (what the '
                                                                    'driver reports in use, CUDA context included) '
                                                                    'between settings of different backends, as '
                                                                    "cudaMallocAsync's 'reserved' is the driver "
                                                                    "pool's, not comparable with the native "
                                                                    "allocator's; settings of one backend by peak "
                                                                    'reserved, which is exact',
                                                                    'backend:cudaMallocAsync came within 1% of its '
                                                                    'peak device memory (33.40 GiB, -0.3%); '
                                                                    'expandable_segments:True wins the tie as a '
                                                                    'native-allocator setting over a backend switch'],
                                                                   [('backend:cudaMallocAsync',
                                                                     'ties with the winner on peak device memory '
                                                                     '(33.40 GiB, -0.3%) but loses the tie: it '
                                                                     'switches the allocator backend, the winner '
                                                                     'keeps the native allocator; throughput 1.000x '
                                                                     "the default's (no significant difference)"),
                                                                    ('',
                                                                     'costs 7.32 GiB more peak reserved than the '
                                                                     'winner (+22.4%)')]),
 'device memory contaminated in one repeat, moved in another': (["peak reserved 28.00 GiB against the default's "
                                                                 '40.00 GiB (-30.0%, saves 12.00 GiB); '
                                                                 'reserved/allocated 2.80 against 4.00',
                                                                 "throughput 1.000x the default's (median 100 "
                                                                 'tokens/s against 100 tokens/s): no significant '
                                                                 'difference (paired t-test over 3 rounds, p = 1; '
                                                                 '95% interval 1.000-1.000x, ±0.0%)',
                                                                 'memory compared as peak device memory (what the '
                                                                 'driver reports in use, CUDA context included) '
                                                                 'between settings of different backends, as '
                                                                 "cudaMallocAsync's 'reserved' is the driver pool's, "
                                                                 "not comparable with the native allocator's; "
                                                                 'settings of one backend by peak reserved, which is '
                                                                 'exact',
                                                                 'device memory contaminated by other processes on '
                                                                 'the GPU, not used: expandable_segments:True repeat '
                                                                 '1 read 64.00 GiB of device memory, more than 1% '
                                                                 'above its peak reserved 28.00 GiB plus 2.00 GiB '
                                                                 'allowed for the CUDA context and libraries '
                                                                 '(expandable_segments:True keeps 28.80 GiB from its '
                                                                 'other repeats)',
                                                                 'device memory moved between repeats by more than '
                                                                 '1%, the lowest is used (other processes only add '
                                                                 'to it): expandable_segments:True +2.1%, 28.80 GiB '
                                                                 'used'],
                                                                [('backend:cudaMallocAsync',
                                                                  'costs 3.00 GiB more peak device memory than the '
                                                                  "winner (+10.4%); throughput 1.000x the default's "
                                                                  '(no significant difference)'),
                                                                 ('',
                                                                  'costs 12.00 GiB more peak reserved than the '
                                                                  'winner (+42.9%)')]),
 'a moving peak loses the tie': (["peak reserved 10.50 GiB against the default's 15.00 GiB (-30.0%, saves 4.50 "
                                  'GiB); reserved/allocated 1.05 against 1.50',
                                  "throughput 1.000x the default's (median 100 tokens/s against 100 tokens/s): no "
                                  'significant difference (paired t-test over 3 rounds, p = 1; 95% interval '
                                  '1.000-1.000x, ±0.0%)',
                                  'roundup_power2_divisions:4 came within 1% of its peak reserved (10.40 GiB, '
                                  '-1.0%); expandable_segments:True wins the tie as its peak repeated exactly '
                                  "while the other's moved between repeats"],
                                 [('roundup_power2_divisions:4',
                                   'ties with the winner on peak reserved (10.40 GiB, -1.0%) but loses the tie: '
                                   "its peak moved between repeats (+0.5%), the winner's repeated exactly; "
                                   "throughput 1.000x the default's (no significant difference)"),
                                  ('', 'costs 4.50 GiB more peak reserved than the winner (+42.9%)')]),
 'a moving peak alone wins, with a caution': (["peak reserved 10.40 GiB against the default's 15.00 GiB (-30.7%, "
                                               'saves 4.60 GiB); reserved/allocated 1.04 against 1.50',
                                               "throughput 1.000x the default's (median 100 tokens/s against 100 "
                                               'tokens/s): no significant difference (paired t-test over 3 rounds, '
                                               'p = 1; 95% interval 1.000-1.000x, ±0.0%)',
                                               'caution: its peak reserved disagreed across repeats by 0.5% (the '
                                               'table shows the median)'],
                                              [('', 'costs 4.60 GiB more peak reserved than the winner (+44.2%)')]),
 'no default in the group': (['the default was not run in this group: chosen on peak reserved alone'],
                             [('max_split_size_mb:128',
                               'costs 2.00 GiB more peak reserved than the winner (+20.0%)')]),
 "no throughput on the default's side": (["peak reserved 10.00 GiB against the default's 15.00 GiB (-33.3%, saves "
                                          '5.00 GiB); reserved/allocated 1.00 against 1.50',
                                          'throughput was not compared (no throughput measured on one side)'],
                                         [('', 'costs 5.00 GiB more peak reserved than the winner (+50.0%)')]),
 'no reserved/allocated figure': (["peak reserved 10.00 GiB against the default's 15.00 GiB (-33.3%, saves 5.00 "
                                   'GiB)',
                                   "throughput 1.000x the default's (median 100 tokens/s against 100 tokens/s): no "
                                   'significant difference (paired t-test over 3 rounds, p = 1; 95% interval '
                                   '1.000-1.000x, ±0.0%)'],
                                  [('', 'costs 5.00 GiB more peak reserved than the winner (+50.0%)')]),
 'settings that take the whole card': (["peak reserved 12.00 GiB against the default's 15.00 GiB (-20.0%, saves 3.00 "
                                        'GiB); reserved/allocated 1.20 against 1.50',
                                        "throughput 1.000x the default's (median 100 tokens/s against 100 tokens/s): "
                                        'no significant difference (paired t-test over 3 rounds, p = 1; 95% interval '
                                        '1.000-1.000x, ±0.0%)',
                                        'max_split_size_mb:128 took (nearly) the whole card: peak reserved 23.50 GiB '
                                        'of its 24.00 GiB, so it fits only because nothing else runs on the card'],
                                       [('', 'costs 3.00 GiB more peak reserved than the winner (+25.0%)'),
                                        ('roundup_power2_divisions:4',
                                         "raises peak reserved to 22.90 GiB (+52.7% against the default's 15.00 "
                                         'GiB)'),
                                        ('max_split_size_mb:128',
                                         "raises peak reserved to 23.50 GiB (+56.7% against the default's 15.00 "
                                         'GiB)')]),
 'one setting takes the whole card, 1% of a large one': (['no setting lowers peak reserved by more than 1% below the '
                                                          "default's 15.00 GiB and meets the rules: keep the default",
                                                          'max_split_size_mb:128 took (nearly) the whole card: peak '
                                                          'reserved 138.50 GiB of its 139.80 GiB, so it fits only '
                                                          'because nothing else runs on the card'],
                                                         [('max_split_size_mb:128',
                                                           'raises peak reserved to 138.50 GiB (+823.3% against the '
                                                           "default's 15.00 GiB)")]),
 'a known problem for what the job used refuses, another only warns': (['peak reserved 12.00 GiB against the '
                                                                        "default's 15.00 GiB (-20.0%, saves 3.00 "
                                                                        'GiB); reserved/allocated 1.20 against '
                                                                        '1.50',
                                                                        "throughput 1.000x the default's (median "
                                                                        '100 tokens/s against 100 tokens/s): no '
                                                                        'significant difference (paired t-test '
                                                                        'over 3 rounds, p = 1; 95% interval '
                                                                        '1.000-1.000x, ±0.0%)',
                                                                        '1 setting was refused for what a short '
                                                                        'trial does not show: '
                                                                        'expandable_segments:True: known to break '
                                                                        'the job on torch 2.11.0+cu130 '
                                                                        '(expandable-cuda-ipc-pidfd; the job sent '
                                                                        'or received CUDA tensors between '
                                                                        'processes): CUDA tensors shared between '
                                                                        "processes fail with 'pidfd_getfd: "
                                                                        "Operation not permitted' where ptrace is "
                                                                        'restricted (containers): expandable '
                                                                        'segments pass their memory as file '
                                                                        'descriptors taken with pidfd_getfd (torch '
                                                                        'every version; '
                                                                        'https://github.com/pytorch/pytorch/issues/165685)',
                                                                        'caution: the chosen setting is known to '
                                                                        'take no effect (in part or whole) on '
                                                                        'torch 2.11.0+cu130 '
                                                                        '(runtime-change-resets-keys; the job '
                                                                        'changed allocator settings at run time): '
                                                                        'the job changes allocator settings at run '
                                                                        'time, which puts max_split_size_mb, '
                                                                        'roundup_power2_divisions and '
                                                                        'garbage_collection_threshold back to '
                                                                        'their defaults unless the change gives '
                                                                        'them (torch every version; '
                                                                        'https://github.com/pytorch/pytorch/blob/065861fba7598880aa3216822742a1172d0a197c/c10/core/AllocatorConfig.cpp)'],
                                                                       [('',
                                                                         'costs 3.00 GiB more peak reserved than '
                                                                         'the winner (+25.0%)'),
                                                                        ('expandable_segments:True',
                                                                         'known to break the job on torch '
                                                                         '2.11.0+cu130 (expandable-cuda-ipc-pidfd; '
                                                                         'the job sent or received CUDA tensors '
                                                                         'between processes): CUDA tensors shared '
                                                                         'between processes fail with '
                                                                         "'pidfd_getfd: Operation not permitted' "
                                                                         'where ptrace is restricted (containers): '
                                                                         'expandable segments pass their memory as '
                                                                         'file descriptors taken with pidfd_getfd '
                                                                         '(torch every version; '
                                                                         'https://github.com/pytorch/pytorch/issues/165685)')]),
 'the default grows, the others raise memory': (['no setting lowers peak reserved by more than 1% below the '
                                                 "default's 15.00 GiB and meets the rules: keep the default",
                                                 'growth check: reserved memory rose 2.00 GiB from step 50 to step '
                                                 '100 (12.00 GiB to 14.00 GiB) while allocated rose 0 B, in 3 of 3 '
                                                 'repeats: it keeps memory it cannot reuse, so a longer run would '
                                                 'need more than this trial measured'],
                                                [('roundup_power2_divisions:4',
                                                  "raises peak reserved to 18.00 GiB (+20.0% against the default's "
                                                  '15.00 GiB)')]),
 'the growth check could not decide': (["peak reserved 10.00 GiB against the default's 15.00 GiB (-33.3%, saves "
                                        '5.00 GiB); reserved/allocated 1.00 against 1.50',
                                        "throughput 1.000x the default's (median 100 tokens/s against 100 "
                                        'tokens/s): no significant difference (paired t-test over 3 rounds, p = 1; '
                                        '95% interval 1.000-1.000x, ±0.0%)',
                                        'caution: the growth check could not decide: none of the 3 repeats '
                                        'recorded samples at two steps to compare (the job ended before step 2K of '
                                        '--check-growth K)'],
                                       [('', 'costs 5.00 GiB more peak reserved than the winner (+50.0%)')]),
 'the growth check refuses a growing setting, the winner is steady': (['peak reserved 12.00 GiB against the '
                                                                       "default's 15.00 GiB (-20.0%, saves 3.00 "
                                                                       'GiB); reserved/allocated 1.20 against 1.50',
                                                                       "throughput 1.000x the default's (median "
                                                                       '100 tokens/s against 100 tokens/s): no '
                                                                       'significant difference (paired t-test over '
                                                                       '3 rounds, p = 1; 95% interval '
                                                                       '1.000-1.000x, ±0.0%)',
                                                                       '1 setting was refused for what a short '
                                                                       'trial does not show: '
                                                                       'expandable_segments:True: growth check: '
                                                                       'reserved memory rose 3.00 GiB from step 50 '
                                                                       'to step 100 (9.00 GiB to 12.00 GiB) while '
                                                                       'allocated rose 0 B, in 3 of 3 repeats: it '
                                                                       'keeps memory it cannot reuse, so a longer '
                                                                       'run would need more than this trial '
                                                                       'measured',
                                                                       'growth check: steady in all 3 repeats '
                                                                       'compared (the largest change: reserved '
                                                                       'memory rose 102.40 MiB from step 50 to '
                                                                       'step 100 (12.00 GiB to 12.10 GiB) while '
                                                                       'allocated rose 0 B)'],
                                                                      [('expandable_segments:True',
                                                                        'growth check: reserved memory rose 3.00 '
                                                                        'GiB from step 50 to step 100 (9.00 GiB to '
                                                                        '12.00 GiB) while allocated rose 0 B, in 3 '
                                                                        'of 3 repeats: it keeps memory it cannot '
                                                                        'reuse, so a longer run would need more '
                                                                        'than this trial measured'),
                                                                       ('',
                                                                        'costs 3.00 GiB more peak reserved than '
                                                                        'the winner (+25.0%)')]),
 "ties are not transitive: within the winner's tie but out of the lowest's": (['peak reserved 10.36 GiB against '
                                                                               "the default's 15.00 GiB (-30.9%, "
                                                                               'saves 4.64 GiB); '
                                                                               'reserved/allocated 1.04 against '
                                                                               '1.50',
                                                                               "throughput 1.000x the default's "
                                                                               '(median 100 tokens/s against 100 '
                                                                               'tokens/s): no significant '
                                                                               'difference (paired t-test over 3 '
                                                                               'rounds, p = 1; 95% interval '
                                                                               '1.000-1.000x, ±0.0%)',
                                                                               'expandable_segments:True came '
                                                                               'within 1% of its peak reserved '
                                                                               '(10.46 GiB, +1.0%); '
                                                                               'expandable_segments:True,roundup_power2_divisions:4 '
                                                                               'wins the tie before any tie rule: '
                                                                               'the other is more than 1% above '
                                                                               'expandable_segments:True,roundup_power2_divisions:4,max_split_size_mb:128 '
                                                                               '(10.30 GiB), which the winner is '
                                                                               'within; '
                                                                               'expandable_segments:True,roundup_power2_divisions:4,max_split_size_mb:128 '
                                                                               'came within 1% of its peak '
                                                                               'reserved (10.30 GiB, -0.6%); '
                                                                               'expandable_segments:True,roundup_power2_divisions:4 '
                                                                               'wins the tie as the simpler '
                                                                               'setting (2 keys against 3)'],
                                                                              [('expandable_segments:True,roundup_power2_divisions:4,max_split_size_mb:128',
                                                                                'ties with the winner on peak '
                                                                                'reserved (10.30 GiB, -0.6%) but '
                                                                                'loses the tie: it sets 3 keys '
                                                                                'against 2; throughput 1.000x the '
                                                                                "default's (no significant "
                                                                                'difference)'),
                                                                               ('expandable_segments:True',
                                                                                'ties with the winner on peak '
                                                                                'reserved (10.46 GiB, +1.0%) but '
                                                                                'loses the tie: before any tie '
                                                                                'rule, it is more than 1% above '
                                                                                'expandable_segments:True,roundup_power2_divisions:4,max_split_size_mb:128 '
                                                                                '(10.30 GiB), which the winner is '
                                                                                'within; throughput 1.000x the '
                                                                                "default's (no significant "
                                                                                'difference)'),
                                                                               ('',
                                                                                'costs 4.64 GiB more peak reserved '
                                                                                'than the winner (+44.8%)')])}

PRECISION = [((None, 1, 0.02, True, 10),
  'throughput was not compared with an interval (fewer than 2 rounds with both the default and the setting): no '
  'slowdown could be detected'),
 ((0.015, 4, 0.02, True, 10),
  'the smallest slowdown this sweep could detect is 1.5% (95% interval ±1.5% after 4 rounds, within the ±2% goal)'),
 ((0.04, 10, 0.02, True, 10),
  'the smallest slowdown this sweep could detect is 4.0% (95% interval ±4.0%): wider than the ±2% goal because the '
  'sweep stopped at --max-repeats 10; at this spread between rounds ±2% needs about 32 rounds'),
 ((0.04, 5, 0.02, True, 10),
  'the smallest slowdown this sweep could detect is 4.0% (95% interval ±4.0%): wider than the ±2% goal because the '
  'time budget ran out (or the sweep was interrupted) after 5 rounds; at this spread between rounds ±2% needs '
  'about 13 rounds'),
 ((0.04, 3, 0.02, False, 3),
  'the smallest slowdown this sweep could detect is 4.0% (95% interval ±4.0%): wider than the ±2% goal because '
  '--repeats fixed 3 rounds; at this spread between rounds ±2% needs about 5 rounds'),
 ((0.04, 1, 0.02, True, 10),
  'the smallest slowdown this sweep could detect is 4.0% (95% interval ±4.0%): wider than the ±2% goal because the '
  'time budget ran out (or the sweep was interrupted) after 1 round'),
 ((0.0, 3, 0.02, True, 10),
  'the smallest slowdown this sweep could detect is 0.0% (95% interval ±0.0% after 3 rounds, within the ±2% goal)')]


# Why memory first left a setting unmeasured (sweep.json's skipped list says it).
UNMEASURED = [
    (Reason(Code.LOSES_ON_MEMORY, Unmeasured(MemoryMeasure.RESERVED, 34 * GiB, ES, 27 * GiB, 0.01, True)),
     "not measured on the GPU: its peak reserved (34.00 GiB, replayed) is more than 1% above "
     "expandable_segments:True's (27.00 GiB), which was not refused"),
    (Reason(Code.LOSES_ON_MEMORY, Unmeasured(MemoryMeasure.RESERVED, 41 * GiB, "", 40 * GiB, 0.01, True)),
     "not measured on the GPU: its peak reserved (41.00 GiB, replayed) is above the default's "
     "(40.00 GiB), and raising memory is never recommended"),
    (Reason(Code.BACKEND_SKIPPED, BackendSkipped(ES, int(9.37 * GiB), int(9.32 * GiB), 0.01, False)),
     "not measured: expandable_segments:True's peak reserved (9.37 GiB, measured) is within 1% of the program's "
     "peak requested bytes (9.32 GiB), and no allocator holds less than the live bytes: a backend switch can at "
     "best tie, and a tie goes to the native allocator"),
]


def planned_reasons() -> list[Reason]:
    """The speed plan's reasons (decide/confirm.py) for replays with known driver work, priced by the committed H200
    calibration against a default measured at 20 ms a step: expandable segments maps 10 pages a step (predicted too
    slow), roundup three cudaMallocs (0.8% of a step: not answered by the prediction alone), max_split_size_mb:128's trace has no steady step, 512 none;
    then the backend switch not named and named, and a confirmation pair of 0.99x and of 0.70x."""
    from dataclasses import replace

    from alloctune.decide.confirm import confirmation, plan_speed
    from alloctune.decide.speed import predictions
    from alloctune.results.calibration import read_calibration
    from alloctune.results.records import DriverWork

    def replayed(conf, reserved, **work):
        r = rec(conf, reserved=reserved, backend="sim")
        return replace(r, env_id="sim:torch-2.11.0",
                       measurement=replace(r.measurement, driver_work=DriverWork(**{"steps": 50, **work})))

    timed = replace(rec(""), measurement=Measurement(peak_reserved_bytes=40 * GiB, peak_allocated_bytes=10 * GiB,
                                                     throughput=50.0, measured_seconds=0.2, measured_steps=10))
    records = [timed, replayed("", 40), replayed(ES, 27, maps=10, map_bytes=200 * MiB),
               replayed(RP, 30, device_allocs=3, device_alloc_bytes=60 * MiB), replayed(MS, 32, steps=0, whole_run=True),
               replayed("max_split_size_mb:512", 35)]
    h200 = read_calibration(Path(__file__).parents[1] / "fixtures" / "calibration" / "h200-torch2.11.json")
    predicted = predictions(records, h200)["torch-2.11.0"]
    replays = summarize_settings([r for r in records if r.backend == "sim"])
    plain = plan_speed(replays, predicted, [ASYNC], 0.02)
    assert plain.winner == "max_split_size_mb:512"
    named = plan_speed(replays, predicted, [ASYNC], 0.02, named=[ASYNC])
    return [why for _, why in plain.rounds + plain.skipped + named.rounds[-1:]] + [
        confirmation(pair, predicted[RP]) for pair in ((100.0, 99.0), (100.0, 70.0))]


PLANNED = [
    "predicted 0.8% slower than the default, within the 2% allowance, from its 3.00 driver calls and 0 syncs per "
    "steady step (the default: 0 and 0, over 50 steps); if its driver calls cost 3 times their price (on the H200 "
    "they cost up to 2.2 times), it would be 2.3% slower than the default, beyond the allowance",
    "its speed was not predicted: the trace marks no steady step to count its driver calls over",
    "not measured: predicted 7.4% slower than the default, beyond the 2% allowance, from its 10.0 driver calls and 0 "
    "syncs per steady step (the default: 0 and 0, over 50 steps); where predictions were measured against the GPU "
    "(H100 and H200, torch 2.11, four jobs with driver work every step, 3-4 settings each), they were off by -24.0 "
    "to +26.1 points (predicted minus measured), and on the H100 put 64 of 64 settings on the side of a 2% allowance "
    "the measurement did, where it could tell; --repeats auto measures it",
    "not measured: the simulator cannot replay it, and the native setting the replay prefers, "
    "expandable_segments:True, already fits the card (no budget was set) at 27.00 GiB peak reserved; name it with "
    "--conf (or use --repeats auto) to measure it",
    "you named it, and the simulator cannot replay it",
    "one confirmation pair (the default, then this setting): throughput 0.990x the default's, predicted 0.992x from "
    "3.00 driver calls and 0 syncs per steady step: consistent with the prediction. One pair tells a difference from "
    "noise only beyond about ±17% (two processes at ±6% each); only rounds (--repeats auto) can say there is no "
    "significant difference",
    "one confirmation pair (the default, then this setting): throughput 0.700x the default's, predicted 0.992x from "
    "3.00 driver calls and 0 syncs per steady step: disagrees with the prediction, slower by more than the about "
    "±17% one pair can tell from noise (two processes at ±6% each)",
]


def test_the_speed_plan_sentences():
    reasons = planned_reasons()
    assert [r.code for r in reasons] == [Code.NOT_NEGLIGIBLE, Code.UNPREDICTED, Code.PREDICTED_TOO_SLOW,
                                         Code.ASYNC_NOT_NEEDED, Code.ASYNC_MEASURED, Code.CONFIRMED, Code.DISAGREES]
    assert [sentence(r) for r in reasons] == PLANNED and [sentence(read_back(r)) for r in reasons] == PLANNED


def test_the_error_quoted_for_a_skipped_setting_gives_the_side_only_at_an_allowance_it_was_counted_for():
    from alloctune.decide.speed import MeasuredError
    from alloctune.report.predicted import measured_error

    e = MeasuredError(-0.1, 0.2, "one GPU", sides=((0.05, 7, 6),))
    plain = "where predictions were measured against the GPU (one GPU), they were off by -10.0 to +20.0 points " \
            "(predicted minus measured)"
    assert measured_error(0.05, e) == plain + ", and put 6 of 7 settings on the side of a 5% allowance the " \
                                              "measurement did, where it could tell"
    assert measured_error(0.03, e) == plain


def test_rounds_for_a_setting_that_adds_synchronisations_and_from_a_file_without_the_worst_case_say_why():
    from alloctune.decide.speed import PredictedSpeed

    synced = PredictedSpeed(0.001, 2.0, 1.0, 0.0, 0.0, 50, 0.02, 0.003)
    assert sentence(Reason(Code.NOT_NEGLIGIBLE, synced)).endswith(
        "; it adds synchronisations, whose stall the prediction does not price")
    old = PredictedSpeed(0.003, 1.0, 0.0, 0.0, 0.0, 50, 0.02)
    assert sentence(Reason(Code.NOT_NEGLIGIBLE, old)).endswith(": too much driver work for the prediction alone to answer")


def decided(name):
    records, max_slowdown = SCENARIOS[name]
    [choice] = choose(summarize_settings(records, max_slowdown))
    return choice


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_sentence_as_the_reports_print_it(name):
    record = choice_record(decided(name))   # as choice.json keeps it and the reports print it
    reasons, runners_up = EXPECTED[name]
    assert list(record.reasons) == reasons
    assert [(u.conf, u.why) for u in record.runners_up] == runners_up


# A choice replayed from a dry run's trace says what the trace stood for (results/provenance.py), the values it made
# up by kind, as `record --dry-run` says them, and that nothing was measured.
DRY_RUN = [
    (Reason(Code.DRY_RUN, DryRunCard("NVIDIA H100 80GB HBM3", "sm90", 4, {"shape": 1, "item": 3})),
     "replayed from a dry run for NVIDIA H100 80GB HBM3 (table row sm90; made up 4 values the script read from the "
     "GPU: item 3, shape 1): decided on memory alone, from the trace a dry run made without a GPU; nothing was "
     "measured"),
    (Reason(Code.DRY_RUN, DryRunCard("NVIDIA H100 80GB HBM3", "sm90", 2)),
     "replayed from a dry run for NVIDIA H100 80GB HBM3 (table row sm90; made up 2 values the script read from the "
     "GPU): decided on memory alone, from the trace a dry run made without a GPU; nothing was measured"),
    (Reason(Code.DRY_RUN, DryRunCard("NVIDIA H100 80GB HBM3", "sm90", 0)),
     "replayed from a dry run for NVIDIA H100 80GB HBM3 (table row sm90): decided on memory alone, from the trace a "
     "dry run made without a GPU; nothing was measured"),
]


@pytest.mark.parametrize("reason, text", DRY_RUN)
def test_a_dry_runs_choice_says_what_its_trace_stood_for(reason, text):
    assert sentence(reason) == text and sentence(read_back(reason)) == text


def test_a_dry_run_reason_written_before_its_kinds_were_kept_says_the_count_as_before():
    """choice.json of an older sweep: the dry run's reason without `invented` reads back, its count alone."""
    figures = {"card": "NVIDIA H100 80GB HBM3", "table": "sm90", "made_up": 2}
    older = Reason.from_record(ReasonRecord("dry_run", figures))
    assert older.figures == DryRunCard("NVIDIA H100 80GB HBM3", "sm90", 2)
    assert "(table row sm90; made up 2 values the script read from the GPU): decided" in sentence(older)


def test_the_scenarios_reach_every_reason_code():
    used = set()
    for name in SCENARIOS:
        choice = decided(name)
        used |= {r.code for r in choice.reasons} | {why.code for _, why in choice.runners_up}
    used |= {precision_of(*args[:3], auto=args[3], max_repeats=args[4]).code for args, _ in PRECISION}
    used |= {reason.code for reason, _ in UNMEASURED + DRY_RUN} | {reason.code for reason in planned_reasons()}
    assert used == set(Code)


@pytest.mark.parametrize("reason, text", UNMEASURED)
def test_unmeasured_sentences(reason, text):
    assert sentence(reason) == text and sentence(read_back(reason)) == text


def test_a_settled_interval_says_why_the_rounds_stopped():
    reason = precision_of(0.03, 3, 0.02, auto=True, max_repeats=10, settled=True)
    assert reason.figures.stop is Stop.SETTLED
    assert sentence(reason) == ("the smallest slowdown this sweep could detect is 3.0% (95% interval ±3.0%): wider "
                                "than the ±2% goal because after 3 rounds the sequential test already answered "
                                "whether it is slower than the 2% allowance, which settles the choice; at this spread "
                                "between rounds ±2% needs about 4 rounds")


def read_back(reason: Reason) -> Reason:
    """Through JSON as choice.json holds it, and the typed reader."""
    data = json.loads(json.dumps(reason.record().figures, allow_nan=False))
    return Reason.from_record(ReasonRecord(reason.code.value, data))


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_reason_read_back_from_its_record_says_the_same(name):
    choice = decided(name)
    refusals = {s.conf: read_back(why) for s, why in choice.runners_up}
    for reason, text in zip(choice.reasons, EXPECTED[name][0]):
        assert read_back(reason) == reason and sentence(read_back(reason), refusals) == text


@pytest.mark.parametrize("args, text", PRECISION)
def test_precision_sentences(args, text):
    detectable, rounds, goal, auto, max_repeats = args
    reason = precision_of(detectable, rounds, goal, auto=auto, max_repeats=max_repeats)
    assert sentence(reason) == text and sentence(read_back(reason)) == text


def test_precision_of_blocks_in_one_process_says_why_the_blocks_stopped_not_the_rounds():
    """The H100's transformers Trainer job (results/h100-in-process-2026-12-06): 13 pairs of blocks, the job ended
    before the alternation reached its resolution; --max-repeats had nothing to do with it."""
    from alloctune.results.alternation import AlternationEnd

    reason = precision_of(0.036, 13, 0.02, auto=True, max_repeats=10, alternation_end=AlternationEnd.JOB_ENDED)
    text = ("the smallest slowdown this sweep could detect is 3.6% (95% interval ±3.6%): wider than the ±2% goal "
            "because the blocks in one process stopped after 13 pairs: the job ended; at this spread between pairs "
            "±2% needs about 36 pairs, a longer run of the job")
    assert sentence(reason) == text and sentence(read_back(reason)) == text


def test_a_tie_lost_by_a_setting_predicted_beyond_the_allowance_says_the_prediction_too():
    from alloctune.decide.order import TieRule
    from alloctune.decide.quoted import AgainstWinner, TieBreak

    lost = TieBreak(TieRule.SIMPLER, 0, 1, 0.0)
    reason = Reason(Code.LOSES_TIE, AgainstWinner(MemoryMeasure.RESERVED, int(11.73 * GiB), int(11.74 * GiB), None,
                                                  lost, 0.134, 0.02))
    text = ("ties with the winner on peak reserved (11.73 GiB, -0.1%) but loses the tie: it sets 1 key against 0; "
            "also predicted 13.4% slower than the default from its driver calls, beyond the 2% allowance")
    assert sentence(reason) == text and sentence(read_back(reason)) == text


def test_medians_that_point_the_other_way_from_the_paired_ratio_are_said_to():
    """The ratio is the mean of paired log ratios; each setting's median comes from all its runs. Where they point
    different ways (0.995x beside 239,712 against 239,521 tokens/s, results/transformer-packed-h200-20261129-235232),
    the words say so rather than read as a contradiction; where they agree, as before."""
    from alloctune.decide.quoted import Throughput
    from alloctune.results.figures import Comparison

    c = Comparison(0.995, 0.67, 0.2, 0.02, 0.956, 1.037, pairs=3)
    other_way = sentence(Reason(Code.THROUGHPUT_SAME, Throughput(c, 239712.0, 239521.0, "tokens", "tokens", 0.02, 0.01)))
    assert other_way.startswith("throughput 0.995x the default's (medians 239,712 tokens/s against 239,521 tokens/s, "
                                "the other way within the pairs' spread): no significant difference")
    same_way = sentence(Reason(Code.THROUGHPUT_SAME, Throughput(c, 239000.0, 239521.0, "tokens", "tokens", 0.02, 0.01)))
    assert same_way.startswith("throughput 0.995x the default's (median 239,000 tokens/s against 239,521 tokens/s): ")


def test_a_change_that_rounds_to_zero_keeps_its_digits_and_none_is_unsigned():
    """A tie 0.04% below the winner (results of `sweep workloads/transformer-packed.yaml --preset h200 --backend sim
    --search 60`: 9.36 GiB) read '-0.0%'; a change is printed with the places it needs, none as '0.0%'."""
    from alloctune.decide.order import TieRule
    from alloctune.decide.quoted import TieBreak, Tied, Ties
    from alloctune.results.vocabulary import signed_percent

    winner = 10_050_000_000
    tied = Tied("expandable_segments:True,large_segment_size_mb:12", winner - 4_000_000,
                TieBreak(TieRule.SIMPLER, 1, 2, 0.0))
    reason = Reason(Code.TIES, Ties("expandable_segments:True", MemoryMeasure.RESERVED, winner, 0.01, (tied,)))
    assert "(9.36 GiB, -0.04%)" in sentence(reason) and sentence(read_back(reason)) == sentence(reason)
    assert [signed_percent(x) for x in (-0.0004, 0.0, 4e-7, -0.2856, 0.021, 3e-5)] == \
        ["-0.04%", "0.0%", "0.0%", "-28.6%", "+2.1%", "+0.003%"]
