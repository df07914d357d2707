"""The ``ropelab`` command line (issue 44): one parser whose commands hand the rest of the line to their module's
``main(argv)``; the Makefile's user commands; ``ropelab prune``."""

import importlib.util
import os
import subprocess
import time

import pytest

from conftest import ROOT

from ropelab import cli


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert all(f"\n    {name}" in out for name in cli.COMMANDS)


def test_an_unknown_command_is_one_line_with_the_choices_and_exit_2(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["reprodcue"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'reprodcue'" in err and "'reproduce'" in err and "'depth-manifold'" in err


def test_no_command_prints_the_commands_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "reproduce" in capsys.readouterr().err


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_each_command_answers_its_own_help(command, capsys):
    if importlib.util.find_spec(cli.COMMANDS[command][0]) is None:
        pytest.skip(f"{cli.COMMANDS[command][0]} is not in this checkout")
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage: ")


def test_the_rest_of_the_line_reaches_the_command_and_its_exit_code_comes_back(capsys):
    assert cli.main(["reproduce", "no_such_table"]) == 2  # reproduce's own refusal
    assert "no_such_table" in capsys.readouterr().err


@pytest.mark.parametrize("command, flag, bad, bound", [
    ("campaign", "--jobs", "0", "1"), ("campaign", "--count", "0", "1"), ("depth-manifold", "--examples", "1", "2"),
    ("escape-routes", "--examples", "0", "1"), ("freq-usage", "--examples", "0", "1"), ("resonance", "--draws", "0", "1"),
    ("guess", "--n", "0", "1"), ("momentum-report", "--k", "0", "1"), ("report", "--smooth", "0", "1"),
    ("extrapolate", "--threads", "0", "1"), ("prune", "--older-than", "-0.5", "0"),
])
def test_a_count_below_its_bound_names_the_flag_and_the_bound_and_exits_2(command, flag, bad, bound, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([command, flag, bad])
    assert done.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"error: argument {flag}: {bad} is invalid: a number >= {bound}")


def test_a_command_whose_module_is_missing_is_one_line(monkeypatch, capsys):
    monkeypatch.setitem(cli.COMMANDS, "later", ("ropelab.experiments.not_written_yet", "a command to come"))
    assert cli.main(["later"]) == 1
    assert capsys.readouterr().err == "ropelab later: its module ropelab.experiments.not_written_yet is not in this checkout\n"


def test_a_command_returning_its_results_exits_0(monkeypatch):
    monkeypatch.setattr(importlib.import_module("ropelab.experiments.bench.cli"), "main", lambda argv: {"rows": argv})
    assert cli.main(["bench", "--quick"]) == 0


def _make(*args: str) -> subprocess.CompletedProcess:
    # -o: the venv's stamp counts as made (a test never reinstalls the venv); -n: print, run nothing. Without the
    # outer make's flags: `make test ARGS=-x` would pass its ARGS into the commands checked here
    outer = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "ARGS")
    env = {k: v for k, v in os.environ.items() if k not in outer}
    return subprocess.run(["make", "-s", "-C", str(ROOT), "-o", ".venv/.installed", *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_bare_make_lists_the_commands_one_line_each():
    listed = _make().stdout.splitlines()[1:]
    names = [line.split()[0] for line in listed]
    assert {"run", "test", "campaign", "reproduce", "report", "claims", "card", "prune", "help"} <= set(names)
    assert len(names) == len(set(names)) and _make("help").stdout == _make().stdout


def test_make_passes_a_table_and_its_arguments_through():
    assert _make("-n", "campaign", "TABLE=bifocal_table1,bio_phase", "ARGS=--plan").stdout.strip().endswith(
        "-m ropelab campaign --tables bifocal_table1,bio_phase --plan")
    assert _make("-n", "reproduce", "TABLE=nosuch", "JOBS=all").stdout.strip().endswith(
        "-m ropelab reproduce nosuch --jobs all")


def _checkpoint(run: os.PathLike, name: str, size: int, age_days: float):
    path = run / "checkpoints" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    then = time.time() - age_days * 86400
    os.utime(path, (then, then))
    (run / "metrics.csv").write_text("step\n")
    return path


def test_prune_deletes_checkpoints_older_than_the_cutoff_and_says_what_it_freed(tmp_path, capsys):
    old = _checkpoint(tmp_path / "runs" / "a" / "job1", "last.ckpt", 2 * 2**20, age_days=30)
    new = _checkpoint(tmp_path / "runs" / "a" / "job2", "last.ckpt", 2**20, age_days=1)
    assert cli.main(["prune", str(tmp_path / "runs"), "--older-than", "14", "--dry-run"]) == 0
    assert "would free 2.0 MB: 1 checkpoints in 1 run folders" in capsys.readouterr().out and old.exists()
    assert cli.main(["prune", str(tmp_path / "runs"), "--older-than", "14"]) == 0
    assert "freed 2.0 MB: 1 checkpoints in 1 run folders" in capsys.readouterr().out
    assert not old.parent.exists() and new.exists() and (tmp_path / "runs/a/job1/metrics.csv").exists()
    assert cli.main(["prune", str(tmp_path / "runs"), "--older-than", "0"]) == 0
    assert not new.exists()


def test_prune_never_touches_results(tmp_path, capsys):
    assert cli.main(["prune", str(ROOT / "results"), "--older-than", "0"]) == 2
    assert "under results/" in capsys.readouterr().err
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "linked").symlink_to(ROOT / "results")  # a link into results/ is not followed
    assert cli.main(["prune", str(tmp_path / "runs"), "--older-than", "0", "--dry-run"]) == 0
    assert "would free 0.0 MB: 0 checkpoints" in capsys.readouterr().out
