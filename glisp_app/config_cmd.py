"""``glisp config show`` and ``glisp config explain KEY``: the effective configuration, and where each value
came from; one key's type, default, value and meaning.

Why: a value can come from five layers (the dataclass default, ``conf/default.toml``, a ``--config`` file, a
``GLISP_SECTION__KEY`` variable, ``--set``/flags), and a run that behaves oddly is usually one layer
overriding another. The meaning of a key is the comment beside it in ``conf/default.toml``, the one place it
is written.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from glisp_core.config import (
    DEFAULT_CONFIG_PATH,
    ENV_PREFIX,
    Config,
    apply_file,
    is_expert,
    load_config,
    to_dict,
    with_values,
)
from glisp_core.errors import ConfigError
from glisp_core.storage.limits import inherited_environment


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["show", "explain"], help="show: every key; explain: one key")
    p.add_argument("key", nargs="?", help="SECTION.KEY, for explain (e.g. partition.parts)")
    p.add_argument("--expert", action="store_true", help="show: the expert tuning keys too")


def flat(cfg: Config) -> dict[str, Any]:
    """Every key of ``cfg`` as ``section.key`` (a table's keys dotted below it; lists as they are)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out[prefix] = node

    walk("", to_dict(cfg))
    return out


def layers(args: argparse.Namespace) -> list[tuple[str, Config]]:
    """The configuration after each layer, in the order ``load_config`` applies them, with the layer's name."""
    steps: list[tuple[str, Config]] = [("default", Config())]
    if DEFAULT_CONFIG_PATH.exists():
        steps.append((str(DEFAULT_CONFIG_PATH.name), apply_file(steps[-1][1], DEFAULT_CONFIG_PATH)))
    if args.config:
        steps.append((f"file {args.config}", apply_file(steps[-1][1], Path(args.config))))
    environ = inherited_environment()
    for name in sorted(k for k in environ if k.startswith(ENV_PREFIX) and "__" in k):
        env = {name: environ[name]}
        steps.append((f"env {name}", load_config(env=env, base=steps[-1][1])))
    for item in args.set or []:
        steps.append((f"--set {item.split('=', 1)[0]}", load_config(overrides=[item], env={}, base=steps[-1][1])))
    cli = with_values(with_values(steps[-1][1], "dataset", root=args.root), "spark", master=args.master)
    steps.append(("command line flag", cli))
    return steps


def origins(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """(effective value, the layer that last set it) of every key."""
    steps = layers(args)
    values, source = flat(steps[0][1]), {k: "default" for k in flat(steps[0][1])}
    for name, cfg in steps[1:]:
        for k, v in flat(cfg).items():
            if k not in values or values[k] != v:
                values[k], source[k] = v, name
    return values, source


def documentation(key: str) -> str:
    """The comment beside ``key`` in conf/default.toml, with its continuation lines ("" when none)."""
    section, _, name = key.rpartition(".")
    lines = DEFAULT_CONFIG_PATH.read_text().splitlines()
    current, doc, inside = "", [], False
    for line in lines:
        head = re.match(r"^\[([\w.]+)\]", line)
        if head:
            current, inside = head.group(1), False
            continue
        m = re.match(r"^(\w+)\s*=.*?#\s?(.*)$", line)
        if m and current == section and m.group(1) == name:
            doc, inside = [m.group(2).strip()], True
        elif inside and re.match(r"^\s+#", line):
            doc.append(line.strip().lstrip("#").strip())
        elif inside:
            break
    return " ".join(doc)


def main(args: argparse.Namespace, cfg: Config) -> int:
    values, source = origins(args)
    if args.action == "show":
        # an expert key a layer set is shown anyway: a run's effective settings must all be visible
        shown = sorted(
            k
            for k in values
            if args.expert or not is_expert(k) or source[k] not in ("default", DEFAULT_CONFIG_PATH.name)
        )
        width = max(len(k) for k in shown)
        for k in shown:
            print(f"{k.ljust(width)} = {json.dumps(values[k])}  # {source[k]}{'  (expert)' if is_expert(k) else ''}")
        if hidden := len(values) - len(shown):
            print(f"# {hidden} expert tuning keys at their defaults not shown (--expert shows them)")
        return 0
    if not args.key or args.key not in values:
        near = sorted(k for k in values if args.key and args.key.split(".")[-1] in k)[:5]
        raise ConfigError("command line", args.key or "-", f"not a configuration key (close: {near or 'none'})")
    default = flat(Config())[args.key]
    kind = "; expert tuning" if is_expert(args.key) else ""
    print(
        f"{args.key} = {json.dumps(values[args.key])}  (from {source[args.key]}; default {json.dumps(default)}{kind})"
    )
    print(documentation(args.key) or "(no description in conf/default.toml)")
    return 0
