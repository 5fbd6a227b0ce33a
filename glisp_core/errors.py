"""One error hierarchy, so callers can catch GLISP's own failures and messages read alike."""

from __future__ import annotations

from collections.abc import Sequence


class GlispError(ValueError):
    """Base of every error GLISP raises on purpose."""


class ConfigError(GlispError):
    """A config file, env override or CLI flag is wrong: names the source, the key and the expected type."""

    def __init__(self, source: str, key: str, message: str) -> None:
        self.source, self.key = source, key
        super().__init__(f"{source}, key {key}: {message}")


class BadInputError(GlispError):
    """Input data is wrong: names the file, the column, the count and examples, then a fix."""

    def __init__(
        self,
        file: str,
        column: str,
        count: int,
        total: int | None,
        problem: str,
        examples: Sequence[object] = (),
        hint: str = "",
    ) -> None:
        self.file, self.column, self.count, self.total = file, column, count, total
        of = f" of {total:,}" if total is not None else ""
        ex = ""
        if examples:
            ex = " (e.g. " + "; ".join(str(e) for e in list(examples)[:3]) + ")"
        tail = f"; {hint}" if hint else ""
        super().__init__(f"{file}, column '{column}': {count:,}{of} rows {problem}{ex}{tail}")


class FormatError(GlispError):
    """A published artifact (manifest, partition file) is missing, corrupt or of an unknown version."""


class StageError(GlispError):
    """A stage cannot run: a missing prerequisite stage or an inconsistent dataset."""
