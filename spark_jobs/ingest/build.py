"""The phases of one ingest run (see ``job``): tables read and checked, vids, edges mapped and written."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from glisp_core.dataset.layout import DatasetVersion
from glisp_core.errors import BadInputError
from spark_jobs.ingest import checks, edgefiles, mapping
from spark_jobs.ingest.checks import RCOL, REASON, SI, summary_of
from spark_jobs.ingest.edgestage import GROUP, EdgeTable, StageOpts, dirty_frame, stage_edges
from spark_jobs.ingest.idmap import dense_index
from spark_jobs.ingest.job import Built, cleanup_stage, no_edges_error
from spark_jobs.ingest.keys import build_rank_map, part_size, write_vertex_rows, write_vertex_tables
from spark_jobs.ingest.phases import Phases
from spark_jobs.ingest.readers import CORRUPT, FID, ROWPOS, SourceFrame
from spark_jobs.ingest.scan import KeySpec, StageSpec, merge_payloads, scan, scan_payloads
from spark_jobs.ingest.sources import (
    DEFAULT_EDGE_TYPE,
    DEFAULT_VERTEX_TYPE,
    IngestPlan,
    edge_source_frame,
    ids_native_long,
    key_string,
    open_edge_source,
    vertex_source_frame,
)

_ROWS_PER_FILE = 4_000_000  # vertex-side tables: one Parquet file per this many rows (output_files = 0)


@dataclass
class VertexState:
    v0: object = None  # checked vertex rows (persisted)
    summary: object = None
    parts: dict = field(default_factory=dict)  # vertex type -> key parts (integer ids)


@dataclass
class IngestRun:
    spark: object
    plan: IngestPlan
    out: DatasetVersion
    stage: Path
    ph: Phases
    log: object
    cached: list = field(default_factory=list)
    b: Built = field(default_factory=Built)

    def cleanup(self) -> None:
        for df in self.cached:
            df.unpersist()
        cleanup_stage(self.stage)

    # ------------------------------------------------------------------------------------------
    def build(self) -> Built:
        ing = self.plan.ing
        self.id_long = ids_native_long(self.plan, self.spark)
        self.b.has_w = any(e.weight for e in ing.edges)
        self.b.has_ts = any(e.timestamp for e in ing.edges)
        with self.ph("read_check"):  # the vertex tables are read while the edge job runs
            reading = Background(self._read_vertices) if ing.vertices else None
            try:
                es = self._read_edges()
                if not any(r[REASON] is None for r in es.extra):
                    raise no_edges_error(self.plan, self.b.edge_rows_in)
            except BaseException:
                if reading is not None:
                    reading.wait()
                raise
            vs = reading.result() if reading is not None else None
        self._decide_types(es, vs)
        if vs is not None:
            with self.ph("vertex_checks"):
                self._vertex_rules(vs)
        with self.ph("idmap"):
            rank, idx, writing = self._vertex_ids(es, vs)
        eplan = self._edge_plan()
        with self.ph("map"):  # with the rank map, the vertex-side tables are written meanwhile
            try:
                results = self._map(es, rank, idx, eplan)
            finally:
                if writing is not None:
                    writing.wait()
            if writing is not None:
                writing.result()
        self._edges_out(results, eplan)
        return self.b

    # ---- read_check --------------------------------------------------------------------------
    def _open_edges(self) -> list:
        """An EdgeTable (what ``edgestage`` needs) for every edge table."""
        ing, tables, offset = self.plan.ing, [], 0
        self.edge_sf = {}
        for i, e in enumerate(ing.edges):
            sf = open_edge_source(self.spark, self.plan, i, offset)
            offset += len(sf.files)
            self.edge_sf[i] = sf
            ok_et = bool(e.etype) or not ing.edge_types or (e.edge_type or DEFAULT_EDGE_TYPE) in ing.edge_types
            ok_vt = not (self.plan.typed and ing.vertex_types) or {e.src_type, e.dst_type} <= set(ing.vertex_types)
            tables.append(
                EdgeTable(
                    si=i,
                    spec=sf.spec,
                    tasks=tuple(sf.tasks),
                    src=e.src,
                    dst=e.dst,
                    weight=e.weight,
                    timestamp=e.timestamp,
                    etype=e.etype,
                    allowed_types=tuple(ing.edge_types),
                    constants_ok=ok_et and ok_vt,
                    int_ids=ing.id_type != "string",
                    src_type=e.src_type,
                    dst_type=e.dst_type,
                )
            )
        return tables

    def _for_scan(self, i: int, df):
        """The columns the scan needs; a table's constant edge type is known from _si, not shipped per row."""
        from pyspark.sql import functions as F

        et = F.col("_et") if self.plan.ing.edges[i].etype else F.lit(None).cast("string")
        cols = [SI, FID, ROWPOS, REASON, RCOL, "_nonint", "_s_int", "_s_str", "_d_int", "_d_str", "_w", "_ts"]
        return df.select(*cols, et.alias("_et"))

    def _stage_specs(self) -> tuple[StageSpec, list[KeySpec]]:
        ing = self.plan.ing
        cols = [("_si", SI, "int16")]
        if ing.vertices:
            cols.append(("_fid", FID, "int32"))
        if any(e.etype for e in ing.edges):
            cols.append(("_et", "_et", "string"))
        if self.b.has_w:
            cols.append(("_w", "_w", "float32"))
        if self.b.has_ts:
            cols.append(("_ts", "_ts", "int64"))
        if ing.duplicates == "drop":
            cols.append(("_rowpos", ROWPOS, "int64"))
        stage = StageSpec(
            str(self.stage / "edges"), (("_s", "_s_int", "_s_str"), ("_d", "_d_int", "_d_str")), tuple(cols)
        )
        keys = []
        if not ing.vertices and ing.id_type != "string":
            st = tuple((i, e.src_type) for i, e in enumerate(ing.edges))
            dt = tuple((i, e.dst_type) for i, e in enumerate(ing.edges))
            keys = [KeySpec("_s_int", "_s_str", type_by_si=st), KeySpec("_d_int", "_d_str", type_by_si=dt)]
        return stage, keys

    def _read_edges(self):
        """Every table through ``edgestage`` (one job), the rows it left through Spark's rules and
        ``scan`` (one more job, only when there are such rows); counts, key sets and files merged."""
        ing = self.plan.ing
        tables = self._open_edges()
        stage, keys = self._stage_specs()
        opts = StageOpts(str(self.stage), keys=bool(keys), fid=bool(ing.vertices), rowpos=ing.duplicates == "drop")
        payloads, dirty = stage_edges(self.spark, tables, opts)
        for p in payloads:
            self.ph.add_task_seconds(p["times"])
        frames = []
        for si, paths in dirty.items():
            if paths:
                sf = self.edge_sf[si]
                dsf = SourceFrame(
                    df=dirty_frame(self.spark, paths, sf.spec), files=sf.files, fmt=sf.fmt, columns=sf.columns
                )
                frames.append((si, edge_source_frame(self.spark, self.plan, si, 0, self.id_long, sf=dsf)[0]))
        if frames:
            payloads += scan_payloads(_union([self._for_scan(i, df) for i, df in frames]), list(GROUP), keys, stage)
        res = merge_payloads(payloads, list(GROUP))
        es = summary_of(res.counts)
        self.b.edge_rows_in = es.total
        for i in range(len(ing.edges)):
            if sum(int(r["count"]) for r in es.extra if r[SI] == i) == 0:
                f0 = self.plan.edge_files[i][0]
                raise BadInputError(
                    str(f0) if len(self.plan.edge_files[i]) == 1 else ing.edges[i].path,
                    "*",
                    0,
                    0,
                    "found: the edge input has no rows at all",
                    hint="check the path and the file",
                )
        if es.bad:  # every bad row is in the rule frames (a clean row is never bad)
            from pyspark.sql import functions as F

            c = F.col
            raw = {
                "src": key_string(c("_s_int"), c("_s_str")),
                "dst": key_string(c("_d_int"), c("_d_str")),
                "etype": c("_et"),
                "weight": F.coalesce(c("_w_raw"), c("_w").cast("string")),
                "timestamp": F.coalesce(c("_ts_raw"), c("_ts").cast("string")),
                "record": c(CORRUPT),
            }
            bad = _union([df for _, df in frames])
            self.b.rejects.update(
                checks.handle_bad(bad, es, self.plan.files, ing.on_bad_input, raw, self.out.rejects, self.log)
            )
        self.escan = res
        return es

    def _read_vertices(self) -> VertexState:
        from pyspark.storagelevel import StorageLevel

        ing, vframes = self.plan.ing, []
        offset = sum(len(f) for f in self.plan.edge_files)
        for i in range(len(ing.vertices)):
            df, sf = vertex_source_frame(self.spark, self.plan, i, offset, self.id_long)
            vframes.append(df)
            offset += len(sf.files)
        v0 = vframes[0]
        for f in vframes[1:]:
            v0 = v0.unionByName(f)
        v0 = v0.persist(StorageLevel.MEMORY_AND_DISK)
        self.cached.append(v0)
        keys = [KeySpec("_id_int", "_id_str", type_col="_vt")] if ing.id_type != "string" else []
        res = scan(v0, [FID, REASON, RCOL, "_vt", "_nonint", "_labnonint", "_fw", SI], keys)
        vs = summary_of(res.counts)
        for i in range(len(ing.vertices)):
            if sum(int(r["count"]) for r in vs.extra if r[SI] == i) == 0:
                raise BadInputError(
                    ing.vertices[i].path,
                    "*",
                    0,
                    0,
                    "found: the vertex input has no rows at all",
                    hint="check the path and the file",
                )
        return VertexState(v0=v0, summary=vs, parts=res.parts)

    # ---- decisions -----------------------------------------------------------------------------
    def _decide_types(self, es, vs: VertexState | None) -> None:
        from spark_jobs.ingest.sources import decide_id_type, label_names, vertex_feature_dim

        ing, b = self.plan.ing, self.b
        good_e = [r for r in es.extra if r[REASON] is None]
        good_v = [r for r in vs.summary.extra if r[REASON] is None] if vs else []
        b.id_type = decide_id_type(ing, self.id_long, good_e, good_v)
        self.key_t = "long" if b.id_type == "int" else "string"
        if vs is not None:
            b.feature_dim = vertex_feature_dim(good_v)
            if any(r["_labnonint"] for r in good_v):
                b.label_names = label_names(vs.v0, self.plan)
        const = {i: e.edge_type or "edge" for i, e in enumerate(ing.edges) if not e.etype}
        self.et_names = {r["_et"] if r["_et"] is not None else const.get(r[SI]) for r in good_e} - {None}
        b.edge_types = list(ing.edge_types) if ing.edge_types else sorted(self.et_names)
        self.etype_const = const

    def _vertex_types(self, names: set[str]) -> list[str]:
        ing = self.plan.ing
        if ing.vertex_types:
            return list(ing.vertex_types)
        if self.plan.typed:
            names = names | {x for e in ing.edges for x in (e.src_type, e.dst_type)}
        if not ing.vertices and not self.plan.typed:
            names = {DEFAULT_VERTEX_TYPE}
        return sorted(n for n in names if n)

    # ---- vertex_checks ---------------------------------------------------------------------------
    def _vertex_rules(self, vs: VertexState) -> None:
        """Feature width (the most common width wins), then duplicate ids (the first row is kept)."""
        from pyspark.sql import functions as F
        from pyspark.storagelevel import StorageLevel

        c = F.col
        ing, b = self.plan.ing, self.b
        raw_v = {
            "id": key_string(c("_id_int"), c("_id_str")),
            "vtype": c("_vt"),
            "label": c("_lab_raw"),
            "split": c("_spl_raw"),
            "features": c("_feat_raw"),
            "record": c(CORRUPT),
        }
        key = c("_id_int") if self.key_t == "long" else key_string(c("_id_int"), c("_id_str"))
        if self._no_second_phase_problem(vs):
            vs.v0 = vs.v0.withColumn("_k", key)
            b.rejects.update(
                checks.handle_bad(
                    vs.v0, vs.summary, self.plan.files, ing.on_bad_input, raw_v, self.out.rejects, self.log
                )
            )
            return
        fw_bad = c(REASON).isNull() & (c("_fw") >= 0) & (c("_fw") != b.feature_dim)
        feat_text = F.when(c("_feat").isNotNull(), c("_feat").cast("string"))
        v1 = (
            vs.v0.withColumn(RCOL, F.when(fw_bad, c("_fcol")).otherwise(c(RCOL)))
            .withColumn("_feat_raw", F.when(fw_bad, feat_text).otherwise(c("_feat_raw")))
            .withColumn(REASON, F.when(fw_bad, F.lit("vertex_feature_width")).otherwise(c(REASON)))
            .withColumn("_k", key)
        )
        kcols = ["_vt", "_k"] if self.plan.typed else ["_k"]
        first = v1.filter(c(REASON).isNull()).groupBy(*kcols).agg(F.min(ROWPOS).alias("_first"))
        dup = c(REASON).isNull() & (c(ROWPOS) != c("_first"))
        idcols = {i: v.id for i, v in enumerate(ing.vertices)}
        id_name = F.create_map(*[x for i, n in idcols.items() for x in (F.lit(i), F.lit(n))])[c(SI)]
        v2 = (
            v1.join(first, kcols, "left")
            .withColumn(RCOL, F.when(dup, id_name).otherwise(c(RCOL)))
            .withColumn(REASON, F.when(dup, F.lit("vertex_duplicate")).otherwise(c(REASON)))
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        self.cached.append(v2)
        keys = [KeySpec("_id_int", "_id_str", type_col="_vt")] if self.key_t == "long" else []
        res = scan(v2, [FID, REASON, RCOL, "_vt"], keys)
        s2 = summary_of(res.counts)
        b.rejects.update(
            checks.handle_bad(v2, s2, self.plan.files, ing.on_bad_input, raw_v, self.out.rejects, self.log)
        )
        vs.v0.unpersist()
        vs.v0, vs.summary, vs.parts = v2, s2, res.parts

    def _no_second_phase_problem(self, vs: VertexState) -> bool:
        """True when no good row has a stray feature width and every integer key is distinct (from the
        first scan's counts and key sets): then the duplicate check needs no join."""
        from spark_jobs.ingest.keys import merge_parts

        good = [r for r in vs.summary.extra if r[REASON] is None]
        if self.key_t != "long" or not vs.parts or not good:
            return False
        if any(r["_fw"] >= 0 and r["_fw"] != self.b.feature_dim for r in good):
            return False
        if self.plan.typed:
            distinct = sum(merge_parts(ps).n for ps in vs.parts.values())
        else:  # untyped edges: an id names one vertex whatever its type
            distinct = merge_parts([p for ps in vs.parts.values() for p in ps]).n
        return distinct == sum(int(r["count"]) for r in good)

    # ---- idmap -------------------------------------------------------------------------------------
    def _rank_parts(self, es, vs: VertexState | None) -> dict | None:
        """Key parts per vertex type name when the rank map applies, else None (the join path)."""
        if self.key_t != "long":
            return None
        if vs is not None:
            parts = vs.parts
        else:
            parts = {(k or DEFAULT_VERTEX_TYPE): v for k, v in self.escan.parts.items()}
            if self.escan.nonint:
                return None
        limit = self.plan.ing.max_rank_map_vertices
        if sum(part_size(p) for ps in parts.values() for p in ps) > 4 * limit:  # merging alone would cost too much
            return None
        return parts

    def _vertex_ids(self, es, vs: VertexState | None):
        """(rank map or None, (key, vid) dictionary DataFrame or None, the vertex-side tables' writing
        when it runs in the background (rank map) or None)."""
        b = self.b
        parts = self._rank_parts(es, vs)
        good_v = [r for r in vs.summary.extra if r[REASON] is None] if vs else []
        b.vertex_types = self._vertex_types({r["_vt"] for r in good_v if r["_vt"] is not None})
        rank = build_rank_map(parts, b.vertex_types) if parts is not None else None
        if rank is not None and rank.n > self.plan.ing.max_rank_map_vertices:
            rank = None
        b.id_map = "rank" if rank is not None else "join"
        if vs is None and rank is not None:
            b.n_vertices = rank.n
            b.per_vtype = {n: t.n for n, t in zip(b.vertex_types, rank.types, strict=True) if t.n}
            files = self.plan.ing.output_files or max(1, -(-rank.n // _ROWS_PER_FILE))
            dirs = str(self.out.idmap), str(self.out.vertices)
            return rank, None, Background(lambda: write_vertex_tables(self.spark, rank, *dirs, files))
        if vs is not None and rank is not None:
            b.n_vertices = rank.n
            return rank, None, Background(lambda: self._vertex_rows_by_rank(vs, rank))
        return rank, self._dictionary(vs), None

    def _vertex_key_frame(self, vs: VertexState):
        """The good vertex rows as (_vtc, _k, label, split, feat)."""
        from pyspark.sql import functions as F

        c, b = F.col, self.b
        vcode = {n: i for i, n in enumerate(b.vertex_types)}
        lab = c("_lab")
        if b.label_names is not None:
            lab = self._code_of(c("_lab_str"), {n: i for i, n in enumerate(b.label_names)}, True).cast("long")
        return vs.v0.filter(c(REASON).isNull()).select(
            self._code_of(c("_vt"), vcode).alias("_vtc"),
            c("_k"),
            lab.alias("label"),
            c("_spl").alias("split"),
            c("_feat").alias("feat"),
        )

    def _vertex_rows_by_rank(self, vs: VertexState, rank) -> None:
        """Vertex-side tables of integer-id vertex tables, vids from the rank map (one job, no sort)."""
        b = self.b
        dirs = {"idmap": str(self.out.idmap), "vertices": str(self.out.vertices), "features": str(self.out.features)}
        parts = write_vertex_rows(self._vertex_key_frame(vs), rank, dirs, b.feature_dim > 0)
        for p in parts:
            for code, n in p["per_type"].items():
                b.per_vtype[b.vertex_types[code]] = b.per_vtype.get(b.vertex_types[code], 0) + n
        labs = [p["maxlab"] for p in parts if p["maxlab"] is not None]
        b.maxlab = max(labs) if labs else None
        b.nfeat = sum(p["nfeat"] for p in parts)
        if sum(b.per_vtype.values()) != rank.n:
            raise AssertionError(f"{sum(b.per_vtype.values())} vertex rows for {rank.n} vertices")

    def _code_of(self, col, codes: dict[str, int], nullable: bool = False):
        from pyspark.sql import functions as F

        if len(codes) == 1 and not nullable:
            return F.lit(next(iter(codes.values()))).cast("int")
        return F.create_map(*[x for k, v in codes.items() for x in (F.lit(k), F.lit(v))])[col].cast("int")

    def _dictionary(self, vs: VertexState | None):
        """Dense vids by a global sort of the distinct (type, key): vertex tables, or string ids."""
        from pyspark.sql import functions as F

        c, b = F.col, self.b
        vcode = {n: i for i, n in enumerate(b.vertex_types)}
        if vs is not None:
            keys = self._vertex_key_frame(vs)
        else:
            keys = self._endpoint_keys(vcode)
        idx, n, idx_cached, vagg = dense_index(
            keys,
            [c("_vtc"), c("_k")],
            "vid",
            group=["_vtc"],
            aggs=[F.max("label").alias("maxlab"), F.count("feat").alias("nfeat")],
        )
        self.cached.append(idx_cached)
        b.n_vertices = n
        for r in vagg:
            name = b.vertex_types[r["_vtc"]]
            b.per_vtype[name] = b.per_vtype.get(name, 0) + int(r["count"])
        b.maxlab = max((r["maxlab"] for r in vagg if r["maxlab"] is not None), default=None)
        b.nfeat = sum(int(r["nfeat"]) for r in vagg)
        nfiles = self.plan.ing.output_files or max(1, -(-n // _ROWS_PER_FILE))

        def write(df, path: Path) -> None:
            df.coalesce(nfiles).write.mode("overwrite").parquet(str(path))

        write(idx.select(c("vid"), c("_k").alias("orig_id"), c("_vtc").cast("int").alias("vtype")), self.out.idmap)
        write(
            idx.select(
                c("vid"), c("_vtc").cast("int").alias("vtype"), c("label").cast("long"), c("split").cast("byte")
            ),
            self.out.vertices,
        )
        if b.feature_dim:
            write(idx.filter(c("feat").isNotNull()).select(c("vid"), c("feat")), self.out.features)
        return idx

    def _endpoint_keys(self, vcode: dict[str, int]):
        """Distinct (type code, key) of the good edge endpoints (no vertex tables, join path)."""
        from pyspark.sql import functions as F

        c, ing = F.col, self.plan.ing
        sf = mapping.staged_frame(self.spark, self._staged_files(), self.key_t, {"_si": "short"})
        if self.plan.typed:
            st = {i: vcode[e.src_type] for i, e in enumerate(ing.edges)}
            dt = {i: vcode[e.dst_type] for i, e in enumerate(ing.edges)}
            s_code = F.create_map(*[x for k, v in st.items() for x in (F.lit(k), F.lit(v))])[c("_si")]
            d_code = F.create_map(*[x for k, v in dt.items() for x in (F.lit(k), F.lit(v))])[c("_si")]
        else:
            s_code = d_code = F.lit(0)
        ends = sf.select(s_code.alias("_vtc"), c("_s").alias("_k")).unionByName(
            sf.select(d_code.alias("_vtc"), c("_d").alias("_k"))
        )
        return ends.distinct().select(
            "_vtc",
            "_k",
            F.lit(None).cast("long").alias("label"),
            F.lit(-1).cast("byte").alias("split"),
            F.lit(None).cast("array<float>").alias("feat"),
        )

    def _staged_files(self) -> list[str]:
        return [p for p, n in self.escan.files if n > 0]

    # ---- map ---------------------------------------------------------------------------------------
    def _edge_plan(self) -> edgefiles.EdgePlan:
        ing, b = self.plan.ing, self.b
        ecode = {n: i for i, n in enumerate(b.edge_types)}
        vcode = {n: i for i, n in enumerate(b.vertex_types)}
        par = int(self.spark.sparkContext.defaultParallelism)
        rows = self.b.edge_rows_in * (1 if ing.directed else 2)
        return edgefiles.EdgePlan(
            stage=str(self.stage),
            out=str(self.out.edges),
            num_vertices=b.n_vertices,
            bounds=edgefiles.bucket_bounds(b.n_vertices, rows, par, ing.output_files),
            directed=ing.directed,
            drop_loops=ing.self_loops == "drop",
            duplicates=ing.duplicates,
            has_w=b.has_w,
            has_ts=b.has_ts,
            etype_const=tuple((i, ecode[n]) for i, n in self.etype_const.items() if n in ecode),
            etype_codes=tuple(ecode.items()),
            src_vtype=tuple((i, vcode[e.src_type]) for i, e in enumerate(ing.edges)) if self.plan.typed else (),
            dst_vtype=tuple((i, vcode[e.dst_type]) for i, e in enumerate(ing.edges)) if self.plan.typed else (),
            src_names=tuple(e.src for e in ing.edges),
            dst_names=tuple(e.dst for e in ing.edges),
        )

    def _map(self, es, rank, idx, eplan) -> list:
        mapping.stage_dirs(str(self.stage))
        files = self._staged_files()
        if rank is not None:
            results = mapping.map_with_rank(self.spark, files, rank, eplan, self.plan.typed)
            missing = lambda: mapping.rank_missing_frame(self.spark, files, rank, eplan, self.plan.typed)  # noqa: E731
        else:
            joined = self._joined(files, idx)
            results = mapping.map_with_join(self.spark, joined, eplan)
            missing = lambda: mapping.join_missing_frame(joined, eplan)  # noqa: E731
        for r in results:
            self.ph.add_task_seconds(getattr(r, "times", {}))
        counts: dict[tuple[int, str], int] = {}
        for r in results:
            for k, n in r.missing.items():
                counts[k] = counts.get(k, 0) + n
        if counts:
            good_per_file: dict[int, int] = {}
            for r in es.extra:
                if r[REASON] is None:
                    good_per_file[r[FID]] = good_per_file.get(r[FID], 0) + int(r["count"])
            s2 = checks.Summary(file_totals=good_per_file)
            for (fid, col), n in counts.items():
                s2.bad[("edge_missing_endpoint", fid, col)] = n
            raw = {k: _c(k) for k in ("src", "dst", "etype", "weight", "timestamp")}
            self.b.rejects.update(
                checks.handle_bad(
                    missing(), s2, self.plan.files, self.plan.ing.on_bad_input, raw, self.out.rejects, self.log
                )
            )
        self.b.loops = sum(r.loops for r in results)
        good_rows = sum(int(r["count"]) for r in es.extra if r[REASON] is None) - sum(counts.values())
        if good_rows <= 0:
            raise no_edges_error(self.plan, self.b.edge_rows_in)
        self.good_rows = good_rows
        return results

    def _joined(self, files: list[str], idx):
        """Staged rows joined with the dictionary: vids in src/dst, null where the endpoint is missing."""
        from pyspark.sql import functions as F

        c, ing, b = F.col, self.plan.ing, self.b
        cols = {"_si": "short"}
        if ing.vertices:
            cols["_fid"] = "int"
        if any(e.etype for e in ing.edges):
            cols["_et"] = "string"
        if b.has_w:
            cols["_w"] = "float"
        if b.has_ts:
            cols["_ts"] = "bigint"
        if ing.duplicates == "drop":
            cols["_rowpos"] = "bigint"
        e = mapping.staged_frame(self.spark, files, self.key_t, cols)
        m = idx.select(c("_vtc"), c("_k"), c("vid"))
        skeys, dkeys = ["_s"], ["_d"]
        if self.plan.typed:
            vcode = {n: i for i, n in enumerate(b.vertex_types)}
            for side, attr, keys in (("_stc", "src_type", skeys), ("_dtc", "dst_type", dkeys)):
                codes = {i: vcode[getattr(x, attr)] for i, x in enumerate(ing.edges)}
                e = e.withColumn(
                    side, F.create_map(*[y for k, v in codes.items() for y in (F.lit(k), F.lit(v))])[c("_si")]
                )
                keys.append(side)
        ms = m.select(
            c("_k").alias("_s"), c("vid").alias("src"), *([c("_vtc").alias("_stc")] if self.plan.typed else [])
        )
        md = m.select(
            c("_k").alias("_d"), c("vid").alias("dst"), *([c("_vtc").alias("_dtc")] if self.plan.typed else [])
        )
        return e.join(ms, skeys, "left").join(md, dkeys, "left")

    # ---- sort, write -------------------------------------------------------------------------------
    def _edges_out(self, results: list, eplan) -> None:
        import numpy as np

        ing, b = self.plan.ing, self.b
        rows = np.sum([r.rows for r in results], axis=0) if results else np.zeros(eplan.nb, np.int64)
        b.loops_dropped = b.loops if ing.self_loops == "drop" else 0
        if ing.duplicates == "keep":
            offsets = np.concatenate([[0], np.cumsum(rows)[:-1]]).tolist()
            with self.ph("sort"):
                final = edgefiles.run_buckets(self.spark, eplan, edgefiles.sort_bucket, offsets)
        else:
            with self.ph("sort"):
                sorted_ = edgefiles.run_buckets(self.spark, eplan, edgefiles.sort_bucket, None)
            for r in sorted_:
                self.ph.add_task_seconds(r["times"])
            counts = [r["rows"] for r in sorted_]
            offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
            with self.ph("write"):
                final = edgefiles.run_buckets(self.spark, eplan, edgefiles.write_bucket, offsets)
        for r in final:
            self.ph.add_task_seconds(r["times"])
        b.n_edges = int(sum(r["rows"] for r in final))
        et = np.sum([r["etype_rows"] for r in final], axis=0)
        b.per_etype = {b.edge_types[i]: int(n) for i, n in enumerate(et) if n and i < len(b.edge_types)}
        b.freq = [r["freq"] for r in final]
        rows_before = self.good_rows - b.loops_dropped
        if ing.directed:
            dedup_rows, b.doubled = b.n_edges, 0
        else:
            unique_loops = sum(r["loops"] for r in final)
            dedup_rows = (b.n_edges + unique_loops) // 2
            b.doubled = b.n_edges - dedup_rows
        b.dups_removed = rows_before - dedup_rows


def _c(name: str):
    from pyspark.sql import functions as F

    return F.col(name)


def _union(frames: list):
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


class Background:
    """``fn()`` in a thread that keeps the caller's Spark job group (``InheritableThread``), so two small
    jobs can use both cores. ``result()`` joins and re-raises the thread's error; ``wait()`` only joins."""

    def __init__(self, fn) -> None:
        from pyspark import InheritableThread

        self._res, self._err = None, None

        def run() -> None:
            try:
                self._res = fn()
            except BaseException as e:  # noqa: BLE001 - handed to the caller by result()
                self._err = e

        self._thread = InheritableThread(target=run)
        self._thread.start()

    def wait(self) -> None:
        self._thread.join()

    def result(self):
        self._thread.join()
        if self._err is not None:
            raise self._err
        return self._res
