"""``glisp config show`` names the layer each value came from; ``glisp config explain KEY`` prints its meaning."""

from __future__ import annotations

import pytest

from glisp_app.cli import main


@pytest.fixture(autouse=True)
def own_environment(monkeypatch):
    """The CLI exports the store limits into its environment (for its children): each test gets its own."""
    import os

    from glisp_core.storage import limits

    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if not k.startswith("GLISP_")})
    monkeypatch.setattr(limits, "_BEFORE", {})


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["config", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_show_names_where_each_value_came_from(capsys, monkeypatch, tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text("[train]\nhidden = 48\n")
    monkeypatch.setenv("GLISP_TRAIN__EPOCHS", "3")
    rc, out, _ = _run(capsys, "show", "--config", str(f), "--set", "partition.parts=7", "--root", "/data/x")
    assert rc == 0
    lines = {ln.split(" = ")[0].strip(): ln for ln in out.splitlines()}
    assert lines["partition.parts"].endswith("= 7  # --set partition.parts")
    assert lines["train.epochs"].endswith("= 3  # env GLISP_TRAIN__EPOCHS")
    assert lines["train.hidden"].endswith(f"= 48  # file {f}")
    assert lines["dataset.root"].endswith('= "/data/x"  # command line flag')
    assert lines["dataset.store_retries"].endswith("= 3  # default")
    assert len(lines) > 130  # every key a user sets, not a selection


def test_show_hides_expert_keys_at_their_defaults_and_never_one_a_layer_set(capsys):
    from glisp_app.config_cmd import flat
    from glisp_core.config import EXPERT_KEYS, EXPERT_SECTIONS, Config, is_expert

    keys = flat(Config())
    assert EXPERT_KEYS <= set(keys)  # no stale or misspelt entry
    assert all(any(k.startswith(f"{s}.") for k in keys) for s in EXPERT_SECTIONS)
    experts = {k for k in keys if is_expert(k)}
    assert "partition.adadne.step" in experts and "partition.parts" not in experts
    _, out, _ = _run(capsys, "show", "--set", "partition.adadne.step=0.2")
    shown = {ln.split(" = ")[0].strip() for ln in out.splitlines() if " = " in ln}
    assert shown & experts == {"partition.adadne.step"}  # set by a layer: shown, marked
    assert "partition.adadne.step" in out and "(expert)" in out
    assert f"# {len(experts) - 1} expert tuning keys at their defaults not shown" in out
    _, out, _ = _run(capsys, "show", "--expert")
    assert {ln.split(" = ")[0].strip() for ln in out.splitlines() if " = " in ln} == set(keys)
    _, out, _ = _run(capsys, "explain", "partition.adadne.step")
    assert "expert tuning" in out.splitlines()[0]


def test_explain_prints_the_value_default_and_meaning(capsys):
    rc, out, _ = _run(capsys, "explain", "dataset.store_timeout_s", "--set", "dataset.store_timeout_s=9")
    assert rc == 0
    head, meaning = out.splitlines()[:2]
    assert head == "dataset.store_timeout_s = 9.0  (from --set dataset.store_timeout_s; default 30.0)"
    assert meaning.startswith("seconds a store may take to answer (between bytes), per attempt")
    rc, out, _ = _run(capsys, "explain", "dataset.store_retries")
    assert "attempts of one store call in all; after them the stage fails naming the store," in out  # continued


def test_explain_refuses_an_unknown_key_naming_close_ones(capsys):
    rc, _, err = _run(capsys, "explain", "partition.partz")
    assert rc == 1 and "not a configuration key" in err


@pytest.mark.parametrize("key", ["partition.parts", "serve.max_inflight_mb", "infer.partition"])
def test_keys_users_set_are_explained(capsys, key):
    rc, out, _ = _run(capsys, "explain", key)
    assert rc == 0 and "(no description" not in out, out
