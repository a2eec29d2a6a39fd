"""`alloctune report` on a folder someone else made says when it changed the folder's choice (a line on stderr,
`changed` in --json) and from what: another --max-slowdown, or the same trials and parameters under this
alloctune's rules; and when best.env's settings changed. A report that changes nothing says nothing."""
from __future__ import annotations

import json

from clirun import in_process
from folders import make_folder, repeats

from alloctune.decide.changed import choice_changes
from alloctune.api.analyze import analyze
from alloctune.results.upgrade import schema1_text

ES = "expandable_segments:True"


def _folder(tmp_path):
    """The default, and expandable_segments 20% slower with a third less memory: kept under a max slowdown of 2%,
    chosen under 50%."""
    return make_folder(tmp_path / "r", repeats("") + repeats(ES, tputs=(80.0, 81.0, 79.0), reserved=10.0))


def _report(folder, *args):
    done = in_process("report", folder.path, "--json", *args)
    assert done.returncode == 0, done.stderr
    (decided,) = json.loads(done.stdout)
    return decided, done.stderr


def test_another_max_slowdown_is_said_with_the_change(tmp_path):
    folder = _folder(tmp_path)
    analyze(folder)
    decided, err = _report(folder, "--max-slowdown", "0.5")
    (change,) = decided["changed"]
    # the default named as every command's --json names it (the choices beside it too), never ""
    assert (change["before"], change["after"], change["max_slowdown"]) == ("default", ES, [0.02, 0.5])
    assert [c["conf"] for c in decided["choices"]] == [ES]
    assert err.splitlines()[0] == ("report: the choice for torch-2.11.0 (cuda) changed from default to "
                                   f"{ES}, decided again from max slowdown 0.5 instead of 0.02")
    assert decided["best_env_changed"]["after"] == [f"PYTORCH_CUDA_ALLOC_CONF={ES}"]
    assert f"best.env now sets PYTORCH_CUDA_ALLOC_CONF={ES} (it set" in err


def test_a_choice_another_alloctune_wrote_is_said_replaced(tmp_path):
    """choice.json holding another winner than these trials give, as an older alloctune's rules wrote it."""
    folder = _folder(tmp_path)
    analyze(folder, max_slowdown=0.5)
    path = folder.path / "choice.json"
    data = json.loads(path.read_text())
    data["choices"][0]["conf"] = ""
    path.write_text(json.dumps(data))
    decided, err = _report(folder, "--max-slowdown", "0.5")
    assert [(c["before"], c["after"]) for c in decided["changed"]] == [("default", ES)]
    assert err.splitlines() == [f"report: the choice for torch-2.11.0 (cuda) changed from default to {ES}, decided "
                                "again from the same trials and parameters by this alloctune's rules (the folder was "
                                "swept by an unnamed version)"]
    assert decided["best_env_changed"] is None   # best.env already held what these trials give
    assert json.loads(path.read_text())["choices"][0]["conf"] == ES


def test_a_report_that_changes_nothing_says_nothing(tmp_path):
    folder = _folder(tmp_path)
    analyze(folder)
    decided, err = _report(folder)
    assert (decided["changed"], decided["best_env_changed"], err) == ([], None, "")


def test_a_group_new_to_the_folder_replaces_nothing(tmp_path):
    folder = _folder(tmp_path)
    analyze(folder)
    (held,) = folder.choices()
    assert choice_changes([], [held]) == [] and choice_changes([held], [held]) == []


def test_a_choice_json_of_schema_1_is_what_the_report_compares_against(tmp_path):
    """A folder an older alloctune decided (choice.json of schema 1, read through its upgrade): the change against
    it is said as against any other, and a report that changes nothing says nothing."""
    folder = _folder(tmp_path)
    analyze(folder)
    path = folder.path / "choice.json"
    path.write_text(schema1_text(folder.choices()))
    decided, err = _report(folder)
    assert (decided["changed"], err) == ([], "")
    data = json.loads(schema1_text(folder.choices()))
    data["choices"][0]["conf"] = ES   # what an older alloctune's rules chose from these trials
    path.write_text(json.dumps(data))
    decided, err = _report(folder)
    assert [(c["before"], c["after"], c["trials"]) for c in decided["changed"]] == [(ES, "default", [6, 6])]
    assert err.startswith(f"report: the choice for torch-2.11.0 (cuda) changed from {ES} to default, decided again "
                          "from the same trials and parameters by this alloctune's rules")
