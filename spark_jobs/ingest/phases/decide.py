"""Between read_check and the vids: what the counts of the good rows decide for the rest of the run.

Why a step of its own: the id type (integer or string keys), the feature width, the label names and the
edge types follow from the first scans' grouped counts alone (the label names from one small distinct
query), and every later phase reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from glisp_core.config import IngestConfig
from glisp_core.errors import BadInputError
from spark_jobs.ingest.checks import CountRow
from spark_jobs.ingest.columns import REASON, SI
from spark_jobs.ingest.phases.context import IngestContext
from spark_jobs.ingest.phases.read_check import EdgeRead, VertexRows
from spark_jobs.ingest.plan import IngestPlan
from spark_jobs.ingest.rules import DEFAULT_EDGE_TYPE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_MAX_LABEL_NAMES = 100_000


@dataclass(frozen=True)
class Types:
    """The run's decisions: id type, feature width, label names, edge types."""

    id_type: str  # "int" or "string"
    feature_dim: int  # 0 without features
    label_names: list[str] | None  # class names when the labels are not integers
    edge_types: list[str]  # in code order
    etype_const: dict[int, str]  # source index -> the one edge type of a table without a type column

    @property
    def key_t(self) -> str:
        """The Spark type of a vertex key."""
        return "long" if self.id_type == "int" else "string"


def decide_types(ctx: IngestContext, edges: EdgeRead, vertices: VertexRows | None) -> Types:
    """The decisions from the good rows' counts (and, for non-integer labels, their distinct names)."""
    ing = ctx.plan.ing
    good_e = edges.summary.good()
    good_v = vertices.summary.good() if vertices is not None else []
    feature_dim, labels = 0, None
    if vertices is not None:
        feature_dim = vertex_feature_dim(good_v)
        if any(r["_labnonint"] for r in good_v):
            labels = label_names(vertices.rows, ctx.plan)
    const = {i: e.edge_type or DEFAULT_EDGE_TYPE for i, e in enumerate(ing.edges) if not e.etype}
    seen = (r["_et"] if r["_et"] is not None else const.get(r[SI]) for r in good_e)
    return Types(
        id_type=decide_id_type(ing, ctx.id_long, good_e, good_v),
        feature_dim=feature_dim,
        label_names=labels,
        edge_types=list(ing.edge_types) if ing.edge_types else sorted({n for n in seen if n is not None}),
        etype_const=const,
    )


def decide_id_type(ing: IngestConfig, id_long: bool, good_e: list[CountRow], good_v: list[CountRow]) -> str:
    """ "int" or "string": integer ids when configured so, or (auto) when every good id parses."""
    if id_long:
        return "int"
    if ing.id_type == "auto":
        nonint = any(r["_nonint"] for r in good_e) or any(r["_nonint"] for r in good_v)
        return "string" if nonint else "int"
    return ing.id_type


def vertex_feature_dim(good_v: list[CountRow]) -> int:
    """The most common feature width of the good vertex rows (ties: the smaller), 0 without features."""
    widths: dict[int, int] = {}
    for r in good_v:
        if r["_fw"] >= 0:
            widths[r["_fw"]] = widths.get(r["_fw"], 0) + int(r["count"])
    return max(widths.items(), key=lambda kv: (kv[1], -kv[0]))[0] if widths else 0


def label_names(rows: DataFrame, plan: IngestPlan) -> list[str]:
    """Sorted distinct non-integer labels of the good vertex rows (at most 100,000 names)."""
    from pyspark.sql import functions as F

    c = F.col
    good = rows.filter(c(REASON).isNull() & c("_lab_str").isNotNull())
    names = good.select("_lab_str").distinct().limit(_MAX_LABEL_NAMES + 1).collect()
    if len(names) > _MAX_LABEL_NAMES:
        raise BadInputError(
            plan.files[0],
            "label",
            len(names),
            None,
            "distinct non-integer labels",
            hint="labels must be integers or a small set of class names",
        )
    return sorted(r["_lab_str"] for r in names)
