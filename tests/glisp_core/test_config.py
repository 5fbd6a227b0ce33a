"""Config layering (defaults <- file <- env <- --set), strict keys and types, and conf/default.toml in step."""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from pathlib import Path

import pytest

from glisp_core.config import (
    DEFAULT_CONFIG_PATH,
    Config,
    EdgeSource,
    IngestConfig,
    RmatConfig,
    VertexSource,
    load_config,
    to_dict,
    with_values,
)
from glisp_core.errors import ConfigError


def write(tmp_path: Path, text: str, name: str = "user.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ---- conf/default.toml documents exactly the dataclass fields -------------------------------


def _section_pairs(cls: type, data: dict, prefix: str = ""):
    """Yield (dotted section, dataclass, toml table) for every nested section."""
    yield prefix, cls, data
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f.name[:-1] if f.name.endswith("_") else f.name
        if dataclasses.is_dataclass(hints[f.name]) and isinstance(data.get(key), dict):
            yield from _section_pairs(hints[f.name], data[key], f"{prefix}.{key}" if prefix else key)


def test_default_toml_keys_match_dataclass_fields_in_every_section():
    data = tomllib.loads(DEFAULT_CONFIG_PATH.read_text())
    seen = set()
    for section, cls, table in _section_pairs(Config, data):
        fields = {f.name[:-1] if f.name.endswith("_") else f.name for f in dataclasses.fields(cls)}
        assert set(table) == fields, (
            f"[{section or 'top level'}] of conf/default.toml and {cls.__name__} differ: "
            f"only in toml {sorted(set(table) - fields)}, only in dataclass {sorted(fields - set(table))}"
        )
        seen.add(section)
    # every nested dataclass section was visited (none missing from the toml)
    assert {"spark", "dataset", "ingest", "rmat", "partition", "partition.adadne", "serialize", "serve"} <= seen


def test_default_toml_values_equal_dataclass_defaults():
    assert load_config(env={}) == Config()


# ---- user file ----------------------------------------------------------------------------------


def test_file_overrides_only_the_keys_it_names(tmp_path):
    p = write(
        tmp_path,
        "[rmat]\nscale = 10\nsplits = [0.5, 0.25, 0.25]\n[partition.adadne]\nlambda = 0.2\n"
        '[spark.conf]\n"spark.executor.memory" = "2g"\n',
    )
    cfg = load_config(p, env={})
    assert cfg.rmat.scale == 10 and cfg.rmat.splits == [0.5, 0.25, 0.25]
    assert cfg.rmat.edge_factor == RmatConfig().edge_factor
    assert cfg.partition.adadne.lambda_ == 0.2 and cfg.partition.adadne.form == "linear"
    assert cfg.spark.conf == {"spark.executor.memory": "2g"}
    assert cfg.partition.parts == Config().partition.parts


def test_edge_and_vertex_blocks(tmp_path):
    p = write(
        tmp_path,
        '[ingest]\ngraph = "g"\n[[ingest.edges]]\npath = "a.csv"\nweight = "w"\n'
        '[[ingest.edges]]\npath = "b.parquet"\nformat = "parquet"\n'
        '[[ingest.vertices]]\npath = "v.csv"\nfeature_columns = ["x", "y"]\n',
    )
    ing = load_config(p, env={}).ingest
    assert ing.edges == [EdgeSource(path="a.csv", weight="w"), EdgeSource(path="b.parquet", format="parquet")]
    assert ing.vertices == [VertexSource(path="v.csv", feature_columns=["x", "y"])]


def test_unknown_key_names_file_and_key(tmp_path):
    p = write(tmp_path, "[rmat]\nsclae = 3\n")
    with pytest.raises(ConfigError) as e:
        load_config(p, env={})
    msg = str(e.value)
    assert str(p) in msg and "rmat.sclae" in msg and "unknown key" in msg and "scale" in msg
    with pytest.raises(ConfigError, match="nosuchsection"):
        load_config(write(tmp_path, "[nosuchsection]\na = 1\n", "b.toml"), env={})


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ('[rmat]\nscale = "ten"\n', "rmat.scale", "expected an int (got 'ten')"),
        ("[rmat]\nscale = true\n", "rmat.scale", "expected an int (got True)"),
        ('[rmat]\na = "x"\n', "rmat.a", "expected a float (got 'x')"),
        ("[rmat]\nweights = 1\n", "rmat.weights", "expected a bool (got 1)"),
        ("[rmat]\nsplits = 0.5\n", "rmat.splits", "expected a list of float (got 0.5)"),
        ('[rmat]\nsplits = [0.5, "a"]\n', "rmat.splits[1]", "expected a float (got 'a')"),
        ('[dataset]\nchecksum = "md5"\n', "dataset.checksum", "expected one of 'content', 'stat' (got 'md5')"),
        ("[partition]\nadadne = 3\n", "partition.adadne", "expected a table (got 3)"),
        ('[[ingest.edges]]\nsrc = "a"\n', "ingest.edges[0].path", "required key is missing"),
    ],
)
def test_wrong_type_names_file_key_and_expectation(tmp_path, text, key, expected):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(p, env={})
    assert str(e.value) == f"{p}, key {key}: {expected}"
    assert e.value.source == str(p) and e.value.key == key


def test_int_is_accepted_for_float(tmp_path):
    assert load_config(write(tmp_path, "[rmat]\na = 1\nb = 0\n"), env={}).rmat.a == 1.0


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "absent.toml", env={})
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[rmat\nscale = 1\n"), env={})


# ---- environment and command line ---------------------------------------------------------------


def test_env_overrides(tmp_path):
    env = {
        "GLISP_RMAT__SCALE": "12",
        "GLISP_PARTITION__ADADNE__LAMBDA": "0.3",
        "GLISP_SPARK__MASTER": "local[3]",  # not valid TOML: taken as a bare string
        "GLISP_RMAT__SPLITS": "[0.7, 0.1, 0.2]",
        "GLISP_NOT_A_KEY": "ignored (no double underscore)",
        "OTHER__X": "ignored (no prefix)",
    }
    cfg = load_config(env=env)
    assert cfg.rmat.scale == 12 and cfg.partition.adadne.lambda_ == 0.3
    assert cfg.spark.master == "local[3]" and cfg.rmat.splits == [0.7, 0.1, 0.2]


def test_env_errors_name_the_variable():
    with pytest.raises(ConfigError) as e:
        load_config(env={"GLISP_RMAT__SCALE": "many"})
    assert str(e.value) == "environment GLISP_RMAT__SCALE, key rmat.scale: expected an int (got 'many')"
    with pytest.raises(ConfigError, match="environment GLISP_RMAT__NOPE, key rmat.nope: unknown key"):
        load_config(env={"GLISP_RMAT__NOPE": "1"})


def test_precedence_file_env_set(tmp_path):
    p = write(tmp_path, "[rmat]\nscale = 10\nseed = 5\nedge_factor = 4\n")
    cfg = load_config(p, overrides=["rmat.scale=14"], env={"GLISP_RMAT__SCALE": "12", "GLISP_RMAT__SEED": "6"})
    assert (cfg.rmat.scale, cfg.rmat.seed, cfg.rmat.edge_factor) == (14, 6, 4)


def test_set_overrides_and_errors():
    cfg = load_config(overrides=["partition.adadne.form=exp", "dataset.root = /tmp/x", "rmat.weights=true"], env={})
    assert cfg.partition.adadne.form == "exp" and cfg.dataset.root == "/tmp/x" and cfg.rmat.weights is True
    with pytest.raises(ConfigError, match="command line, key rmat.scale: expected section.key=value"):
        load_config(overrides=["rmat.scale"], env={})
    with pytest.raises(ConfigError) as e:
        load_config(overrides=["partition.adadne.form=cubic"], env={})
    assert str(e.value).startswith("command line --set, key partition.adadne.form: expected one of")
    assert "(got 'cubic')" in str(e.value)


def test_cli_set_reaches_the_command(tmp_path, capsys):
    """``glisp <cmd> --set`` and --root are applied before the command runs (here: where report looks)."""
    from glisp_app.cli import main

    assert main(["report", "g", "--set", f"dataset.root={tmp_path / 'a'}"]) == 1
    assert str(tmp_path / "a") in capsys.readouterr().err
    assert main(["report", "g", "--set", f"dataset.root={tmp_path / 'a'}", "--root", str(tmp_path / "b")]) == 1
    assert str(tmp_path / "b") in capsys.readouterr().err  # the flag wins over --set
    assert main(["report", "g", "--set", "dataset.nope=1"]) == 1
    assert "command line --set, key dataset.nope: unknown key" in capsys.readouterr().err


# ---- helpers ------------------------------------------------------------------------------------


def test_with_values_and_to_dict():
    cfg = Config()
    assert with_values(cfg, "rmat", scale=None) is cfg
    c2 = with_values(cfg, "partition", parts=8, seed=None)
    assert c2.partition.parts == 8 and c2.partition.seed == cfg.partition.seed
    with pytest.raises(ConfigError, match="expected an int"):
        with_values(cfg, "partition", parts="8")
    d = to_dict(c2.partition)
    assert d["adadne"]["lambda"] == 0.1 and "lambda_" not in d["adadne"] and d["parts"] == 8
    assert to_dict(IngestConfig(edges=[EdgeSource(path="x")]))["edges"][0]["path"] == "x"


def test_sections_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().rmat.scale = 3  # type: ignore[misc]
