"""The glisp command: dispatch, common flags, and honest errors."""

from __future__ import annotations

import subprocess
import sys

from glisp_app.cli import COMMANDS, main


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_unknown_command_is_an_error(capsys):
    assert main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_every_command_module_has_the_interface():
    import importlib

    for name, (module, _) in COMMANDS.items():
        m = importlib.import_module(module)
        assert callable(m.add_arguments), name
        assert callable(m.main), name


def test_bad_config_override_names_the_key(capsys):
    assert main(["report", "nowhere", "--set", "partition.parts=four"]) == 1
    err = capsys.readouterr().err
    assert "key partition.parts: expected an int (got 'four')" in err


def test_infer_on_a_missing_dataset_says_so(capsys, tmp_path):
    assert main(["infer", "nowhere", "--root", str(tmp_path)]) == 1
    assert "dataset 'nowhere': no published version found" in capsys.readouterr().err


def test_console_script_runs():
    r = subprocess.run([sys.executable, "-m", "glisp_app.cli", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "serve-cluster" in r.stdout
