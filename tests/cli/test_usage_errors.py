"""A command line the parser cannot read is one line, `alloctune: error: ...` naming the command whose --help lists
its options, exit 2, no usage block: for every subcommand and every kind of argparse refusal; --help stays as
argparse prints it."""
from __future__ import annotations

import pytest
from clirun import cli, in_process

from alloctune.cli.main import SUBCOMMANDS


def one_line(run, command: str) -> str:
    assert run.returncode == 2 and run.stdout == "", run
    [line] = run.stderr.splitlines()
    assert line.startswith("alloctune: error: ") and line.endswith(f"(see {command} --help)"), line
    assert "usage:" not in run.stderr
    return line


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_an_unknown_option_of_every_subcommand(name, tmp_path):
    line = one_line(in_process(name, "--no-such-option", "x", cwd=tmp_path), f"alloctune {name}")
    assert "unrecognized arguments: --no-such-option" in line or "arguments are required" in line, line


@pytest.mark.parametrize("args, says", [
    (["fit"], "the following arguments are required: --param"),
    (["fit", "--param"], "argument --param: expected one argument"),
    (["fleet", "a.xz", "--jobs", "0"], "argument --jobs: expected a whole number"),
    (["sweep", "w.yaml", "--repeats", "x"], "argument --repeats: expected confirm, auto"),
    (["export", "f", "--format", "nope"], "argument --format"),
    (["replay", "--conf"], "argument --conf: expected one argument"),
])
def test_missing_and_malformed_values(args, says, tmp_path):
    assert says in one_line(in_process(*args, cwd=tmp_path), f"alloctune {args[0]}")


def test_an_unknown_command_and_options_before_it_name_alloctune_help(tmp_path):
    assert "invalid choice: 'nosuch'" in one_line(cli("nosuch", cwd=tmp_path), "alloctune")
    assert "unrecognized arguments: --bogus" in one_line(cli("--bogus", cwd=tmp_path), "alloctune")


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_no_subcommand_takes_an_abbreviated_option(name, tmp_path):
    """`--hel` is not --help (argparse's abbreviations: cli/main._Parser takes options spelled in full only)."""
    one_line(in_process(name, "--hel", cwd=tmp_path), f"alloctune {name}")


def test_help_is_argparse_s_own(tmp_path):
    run = cli("fit", "--help", cwd=tmp_path)
    assert run.returncode == 0 and run.stdout.startswith("usage: alloctune fit ") and run.stderr == ""
