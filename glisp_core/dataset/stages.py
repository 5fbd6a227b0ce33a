"""Stage names as a small type: ``kind`` or ``kind/run`` (``ingest``, ``partition/adadne-p8``, ``train/node-sage``).

Every stage of a version is recorded in its manifest under such a name; the run part names one of several
outputs of the same kind (a partition run, an inference run). Parse a name here instead of splitting strings.
"""

from __future__ import annotations

from dataclasses import dataclass

from glisp_core.errors import GlispError

KINDS = ("ingest", "partition", "serialize", "reorder", "train", "infer")


@dataclass(frozen=True)
class StageName:
    """One stage's manifest name, split into its kind and its run (``""`` for a stage without runs)."""

    kind: str
    run: str = ""

    @classmethod
    def parse(cls, name: str) -> StageName:
        kind, _, run = name.partition("/")
        if not kind:
            raise GlispError(f"stage name {name!r}: expected KIND or KIND/RUN (e.g. 'partition/adadne-p8')")
        return cls(kind, run)

    def __str__(self) -> str:
        return f"{self.kind}/{self.run}" if self.run else self.kind


def run_of(name: str) -> str:
    """The run part of a stage name (``partition/adadne-p8`` -> ``adadne-p8``; ``""`` for ``ingest``)."""
    return StageName.parse(name).run
