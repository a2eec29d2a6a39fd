"""What a short trial cannot tell, decided: known problems for the features the job used (from the trials'
`features`), refusing or warning by severity, and the growth check of `--check-growth`; asserted as codes and
figures (tests/report/test_words.py pins the sentences)."""
import pytest

from alloctune.decide.choice import choose
from alloctune.decide.growth import Sample
from alloctune.decide.reasons import Code
from alloctune.decide.quoted import GrowthCheck, KnownProblem
from alloctune.decide.safety import job_features, safety, target_torch
from alloctune.decide.summary import summarize_settings
from alloctune.errors import ResultsError
from alloctune.results.records import Measurement, TrialRecord, TrialState
from alloctune.settings.conf import AllocConf
from alloctune.settings.known import Feature, Severity
from alloctune.units import GiB

ES = "expandable_segments:True"
RP = "roundup_power2_divisions:4"
MS = "max_split_size_mb:128"
IPC_URL = "https://github.com/pytorch/pytorch/issues/165685"


def rec(conf="", repeat=0, reserved=15.0, tput=100.0, state=TrialState.OK, features=None, growth=None,
        torch="2.13.0+cu130", error=None):
    m = None
    if state is TrialState.OK:
        m = Measurement(peak_reserved_bytes=int(reserved * GiB), peak_allocated_bytes=int(10 * GiB), throughput=tput,
                        unit="tokens", growth_samples=growth)
    return TrialRecord(workload="w", workload_hash="h1", conf=conf, repeat=repeat, env_id="torch-2.13.0",
                       backend="cuda", state=state, measurement=m, error=error, env={"torch": torch},
                       features=features)


def setting(conf, tputs=(100.0, 100.5, 99.5), **kw):
    return [rec(conf, i, tput=t, **kw) for i, t in enumerate(tputs)]


def decide(records):
    [choice] = choose(summarize_settings(records))
    return choice


def why(choice, conf):
    return next(w for s, w in choice.runners_up if s.conf == conf)


def codes(choice):
    return [r.code for r in choice.reasons]


def gib(x):
    return int(x * GiB)


def test_a_broken_setting_for_a_feature_the_job_used_is_refused_with_its_source():
    # expandable segments would save the most memory, but the job shares CUDA tensors between processes
    choice = decide(setting("", features=["cuda_ipc"]) + setting(ES, reserved=9.0) + setting(RP, reserved=12.0))
    assert choice.best.conf == RP and choice.features == (Feature.CUDA_IPC,)
    refused = why(choice, ES)
    assert refused.code is Code.KNOWN_PROBLEM
    assert refused.figures == KnownProblem("expandable-cuda-ipc-pidfd", Severity.BROKEN, IPC_URL, "2.13.0+cu130",
                                           (Feature.CUDA_IPC,))
    assert codes(choice) == [Code.SAVES_MEMORY, Code.THROUGHPUT_SAME, Code.REFUSED_UNSAFE]
    assert choice.reasons[-1].figures.refused == (ES,)


def test_without_the_feature_the_same_setting_wins():
    choice = decide(setting("", features=[]) + setting(ES, reserved=9.0) + setting(RP, reserved=12.0))
    assert choice.best.conf == ES and choice.features == () and Code.REFUSED_UNSAFE not in codes(choice)
    # records from before features were kept (None) say nothing either
    assert decide(setting("") + setting(ES, reserved=9.0)).best.conf == ES


def test_a_feature_seen_in_any_trial_is_the_jobs():
    # the crash of one setting hid the feature from its own record; the default's trials saw it
    records = (setting("", features=["cuda_ipc", "nccl"])
               + setting(ES, state=TrialState.CRASHED, error="RuntimeError: pidfd_getfd: Operation not permitted"))
    choice = decide(records)
    assert why(choice, ES).code is Code.KNOWN_PROBLEM and choice.best.conf == ""
    assert codes(choice) == [Code.KEEP_DEFAULT, Code.REFUSED_UNSAFE]
    assert job_features(records) == {Feature.CUDA_IPC, Feature.NCCL}
    assert job_features([rec(features=["cuda_ipc", "from_a_newer_alloctune"])]) == {Feature.CUDA_IPC}


def test_a_refused_lower_setting_is_said_once_as_unsafe():
    choice = decide(setting("", features=["vllm"]) + setting(ES, reserved=9.0)
                    + setting(MS, reserved=8.0, tputs=(80.0, 80.5, 79.5)))
    assert choice.best.is_default
    assert codes(choice) == [Code.KEEP_DEFAULT, Code.REFUSED_LOWER, Code.REFUSED_UNSAFE]
    assert choice.reasons[1].figures.refused == (MS,) and choice.reasons[2].figures.refused == (ES,)
    # vLLM's custom all-reduce breaks (refuses) before its sleep mode's switch-off (would only warn)
    assert why(choice, ES).figures.problem == "expandable-vllm-custom-allreduce"


def test_an_ineffective_problem_only_warns_and_the_winner_says_so():
    choice = decide(setting("", features=["runtime_allocator_change"]) + setting(RP, reserved=12.0))
    assert choice.best.conf == RP
    assert codes(choice) == [Code.SAVES_MEMORY, Code.THROUGHPUT_SAME, Code.KNOWN_CAVEAT]
    caveat = choice.reasons[-1].figures
    assert (caveat.problem, caveat.severity, caveat.features) == (
        "runtime-change-resets-keys", Severity.INEFFECTIVE, (Feature.RUNTIME_ALLOCATOR_CHANGE,))
    assert caveat.source.startswith("https://github.com/pytorch/pytorch/blob/")


def test_the_target_torch_decides_which_ranges_apply():
    unread = ["unread_variable"]
    on_29 = decide(setting("", features=unread, torch="2.9.1") + setting(RP, reserved=12.0, torch="2.9.1"))
    assert codes(on_29)[-1] is Code.KNOWN_CAVEAT and on_29.reasons[-1].figures.problem == "alloc-conf-unread-2.9"
    on_213 = decide(setting("", features=unread) + setting(RP, reserved=12.0))
    assert Code.KNOWN_CAVEAT not in codes(on_213)
    assert target_torch({"torch": "2.11.0", "simulated_as": "2.13.0"}) == "2.13.0"
    assert target_torch({"torch": "2.11.0"}) == "2.11.0" and target_torch({}) is None


def test_an_always_problem_refuses_what_the_grid_would_have_skipped():
    # a folder from before the table (or settings run by hand): the choice still refuses them
    choice = decide(setting("") + setting(f"{ES},{MS}", reserved=8.0) + setting(ES, reserved=9.0))
    refused = why(choice, f"{ES},{MS}")
    assert choice.best.conf == ES and refused.code is Code.KNOWN_PROBLEM
    assert (refused.figures.problem, refused.figures.severity, refused.figures.features) == (
        "expandable-max-split-growth", Severity.WASTEFUL, ())


def samples(at_k, at_2k, allocated=(8.0, 8.0), k=50):
    return [[k, gib(at_k), gib(allocated[0])], [2 * k, gib(at_2k), gib(allocated[1])]]


def test_a_growing_setting_is_refused_and_the_steady_winner_says_so():
    records = (setting("", growth=samples(15.0, 15.0)) + setting(ES, reserved=9.0, growth=samples(9.0, 12.0))
               + setting(RP, reserved=12.0, growth=samples(12.0, 12.1)))
    choice = decide(records)
    assert choice.best.conf == RP
    grew = why(choice, ES)
    assert grew.code is Code.GROWING
    assert grew.figures == GrowthCheck(3, 3, 3, Sample(50, gib(9), gib(8)), Sample(100, gib(12), gib(8)))
    assert codes(choice) == [Code.SAVES_MEMORY, Code.THROUGHPUT_SAME, Code.REFUSED_UNSAFE, Code.GROWTH_STEADY]
    steady = choice.reasons[-1].figures
    assert (steady.checked, steady.growing, steady.at_2k.reserved) == (3, 0, gib(12.1))


def test_growth_in_one_repeat_refuses_with_that_repeats_figures():
    grows = [rec(ES, 0, reserved=9.0, growth=samples(9.0, 9.0)), rec(ES, 1, reserved=9.0, growth=samples(9.0, 11.0)),
             rec(ES, 2, reserved=9.0, growth=samples(9.0, 9.1))]
    figures = why(decide(setting("") + grows), ES).figures
    assert (figures.repeats, figures.checked, figures.growing, figures.at_2k.reserved) == (3, 3, 1, gib(11))


def test_reserved_rising_with_allocated_is_not_growth():
    choice = decide(setting("") + setting(ES, reserved=12.0, growth=samples(9.0, 12.0, allocated=(8.0, 11.0))))
    assert choice.best.conf == ES and codes(choice)[-1] is Code.GROWTH_STEADY


def test_the_default_is_never_refused_for_growing_the_choice_says_it():
    choice = decide(setting("", growth=samples(12.0, 14.0)) + setting(RP, reserved=18.0, growth=samples(18.0, 18.0)))
    assert choice.best.is_default and codes(choice) == [Code.KEEP_DEFAULT, Code.GROWING]


def test_undecided_and_unasked_growth_checks():
    # asked, but the job ended before step 2K: no samples to compare
    choice = decide(setting("", growth=[]) + setting(ES, reserved=10.0, growth=[[40, gib(10), gib(8)]]))
    assert choice.best.conf == ES and codes(choice)[-1] is Code.GROWTH_UNDECIDED
    assert choice.reasons[-1].figures == GrowthCheck(3, 0, 0)
    # not asked (None): no growth reason at all
    assert codes(decide(setting("") + setting(ES, reserved=10.0))) == [Code.SAVES_MEMORY, Code.THROUGHPUT_SAME]
    assert safety(AllocConf.parse(ES), [rec(ES, state=TrialState.OOM)], "2.13.0", frozenset()).growth is None


@pytest.mark.parametrize("rows, words", [
    ([[1, 2]], "expected \\[step, reserved, allocated\\]"),
    ([[1, -2, 3]], "expected .* of non-negative integers"),
    ([[5, 1, 1], [5, 2, 1]], "expected rising steps, got step 5 after 5"),
])
def test_damaged_growth_samples_are_refused_by_the_reader(rows, words):
    data = rec(growth=[[1, 1, 1]]).to_json()
    data["measurement"]["growth_samples"] = rows
    with pytest.raises(ResultsError, match=f"field 'measurement.growth_samples': {words}"):
        TrialRecord.from_json(data)
