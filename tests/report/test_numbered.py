"""The one rule of every table that names settings (report/tables.numbered), on tables built here of known widths:
a setting is whole where the table fits; else folded between its keys, as wide as fits, never inside a key's value;
numbered only where even the narrowest fold does not fit and numbering makes it fit, never where it would not; and
a setting in two rows of one table (a fit's answer confirmed at two values) is one number, given whole once."""
from __future__ import annotations

from alloctune.report.tables import fold, numbered

LONG = "expandable_segments:True,roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"
SETTINGS = ["default", LONG, "max_split_size_mb:128"]


def within(width: int, figures: int = 30):
    """A table of a setting column and `figures` columns of figures: it fits where it is `width` wide at most."""
    return lambda labels: max(len(line) for label in labels for line in label.split("\n")) + figures <= width


def test_whole_where_it_fits_and_folded_between_its_keys_as_wide_as_fits():
    assert numbered(SETTINGS, within(200)) == (SETTINGS, [])
    labels, below = numbered(SETTINGS, within(80))
    assert below == [] and labels[0] == "default" and labels[2] == "max_split_size_mb:128"
    assert labels[1] == "expandable_segments:True,\nroundup_power2_divisions:[256:1,512:2,1024:4,>:8]"   # 50 wide
    assert labels[1].replace("\n", "") == LONG and all(line.endswith(",") for line in labels[1].split("\n")[:-1])
    assert fold(LONG, 10).split("\n") == ["expandable_segments:True,", LONG.split(",", 1)[1]]


def test_a_list_value_is_never_broken_between_its_values():
    """A key's value is one token: roundup_power2_divisions:[256:1,512:2,1024:4,>:8] is never split after the
    commas inside its brackets; where it does not fit whole beside the figures it is numbered (given whole below)."""
    alone = "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"   # 49 wide
    assert fold(alone, 20) == alone
    labels, below = numbered(["default", alone], within(70))
    assert labels == ["default", "(1)"] and below == [f"  (1) {alone}"]


def test_numbered_only_where_no_fold_fits_and_never_where_numbering_does_not_help():
    # the narrowest fold is 49 wide (roundup_power2_divisions:[256:1,512:2,1024:4,>:8]): 79 with the figures
    labels, below = numbered(SETTINGS, within(75))
    assert labels == ["default", "(1)", "max_split_size_mb:128"] and below == [f"  (1) {LONG}"]
    assert numbered(SETTINGS, within(20)) == ([fold(s, 49) for s in SETTINGS], [])   # even "(1)" is too wide


def test_a_setting_in_two_rows_is_one_number_and_one_line_below():
    """fit's confirmed table has a row per value run: the setting's second row was given whole a second time below
    the table (fit took the duplicate line out itself)."""
    labels, below = numbered(["default", LONG, LONG, "max_split_size_mb:128"], within(75))
    assert labels == ["default", "(1)", "(1)", "max_split_size_mb:128"] and below == [f"  (1) {LONG}"]
