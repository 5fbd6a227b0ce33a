from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Direction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUT: _ClassVar[Direction]
    IN: _ClassVar[Direction]
OUT: Direction
IN: Direction

class Array(_message.Message):
    __slots__ = ("data", "dtype", "shape")
    DATA_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, data: _Optional[bytes] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ...) -> None: ...

class TypeFanout(_message.Message):
    __slots__ = ("edge_type", "fanout")
    EDGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    FANOUT_FIELD_NUMBER: _ClassVar[int]
    edge_type: str
    fanout: int
    def __init__(self, edge_type: _Optional[str] = ..., fanout: _Optional[int] = ...) -> None: ...

class GatherRequest(_message.Message):
    __slots__ = ("seeds", "fanout", "type_fanouts", "method", "direction", "max_time", "seed", "edge_ids", "request_id", "version")
    SEEDS_FIELD_NUMBER: _ClassVar[int]
    FANOUT_FIELD_NUMBER: _ClassVar[int]
    TYPE_FANOUTS_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    MAX_TIME_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    EDGE_IDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    seeds: Array
    fanout: int
    type_fanouts: _containers.RepeatedCompositeFieldContainer[TypeFanout]
    method: str
    direction: Direction
    max_time: int
    seed: int
    edge_ids: bool
    request_id: int
    version: str
    def __init__(self, seeds: _Optional[_Union[Array, _Mapping]] = ..., fanout: _Optional[int] = ..., type_fanouts: _Optional[_Iterable[_Union[TypeFanout, _Mapping]]] = ..., method: _Optional[str] = ..., direction: _Optional[_Union[Direction, str]] = ..., max_time: _Optional[int] = ..., seed: _Optional[int] = ..., edge_ids: _Optional[bool] = ..., request_id: _Optional[int] = ..., version: _Optional[str] = ...) -> None: ...

class GatherResponse(_message.Message):
    __slots__ = ("counts", "neighbors", "keys", "edge_ids", "merge", "fanouts", "part_id", "request_id", "error_code", "error", "version")
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    NEIGHBORS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    EDGE_IDS_FIELD_NUMBER: _ClassVar[int]
    MERGE_FIELD_NUMBER: _ClassVar[int]
    FANOUTS_FIELD_NUMBER: _ClassVar[int]
    PART_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    counts: Array
    neighbors: Array
    keys: Array
    edge_ids: Array
    merge: str
    fanouts: _containers.RepeatedScalarFieldContainer[int]
    part_id: int
    request_id: int
    error_code: int
    error: str
    version: str
    def __init__(self, counts: _Optional[_Union[Array, _Mapping]] = ..., neighbors: _Optional[_Union[Array, _Mapping]] = ..., keys: _Optional[_Union[Array, _Mapping]] = ..., edge_ids: _Optional[_Union[Array, _Mapping]] = ..., merge: _Optional[str] = ..., fanouts: _Optional[_Iterable[int]] = ..., part_id: _Optional[int] = ..., request_id: _Optional[int] = ..., error_code: _Optional[int] = ..., error: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("vertices", "features", "labels", "version")
    VERTICES_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    vertices: Array
    features: bool
    labels: bool
    version: str
    def __init__(self, vertices: _Optional[_Union[Array, _Mapping]] = ..., features: _Optional[bool] = ..., labels: _Optional[bool] = ..., version: _Optional[str] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("features", "labels", "split", "version")
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    features: Array
    labels: Array
    split: Array
    version: str
    def __init__(self, features: _Optional[_Union[Array, _Mapping]] = ..., labels: _Optional[_Union[Array, _Mapping]] = ..., split: _Optional[_Union[Array, _Mapping]] = ..., version: _Optional[str] = ...) -> None: ...

class VertexInfoRequest(_message.Message):
    __slots__ = ("vertices",)
    VERTICES_FIELD_NUMBER: _ClassVar[int]
    vertices: Array
    def __init__(self, vertices: _Optional[_Union[Array, _Mapping]] = ...) -> None: ...

class VertexInfoResponse(_message.Message):
    __slots__ = ("out_degree", "in_degree", "replicas", "master")
    OUT_DEGREE_FIELD_NUMBER: _ClassVar[int]
    IN_DEGREE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MASTER_FIELD_NUMBER: _ClassVar[int]
    out_degree: Array
    in_degree: Array
    replicas: Array
    master: Array
    def __init__(self, out_degree: _Optional[_Union[Array, _Mapping]] = ..., in_degree: _Optional[_Union[Array, _Mapping]] = ..., replicas: _Optional[_Union[Array, _Mapping]] = ..., master: _Optional[_Union[Array, _Mapping]] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("requests", "vertices_served", "edges_served", "busy_seconds", "rss_bytes", "dataset", "run", "part_id", "num_parts", "num_vertices", "num_edges", "partition_bytes", "uptime_seconds", "edge_types", "weighted", "timestamped", "feature_dim", "format_version", "rss_baseline_bytes", "rss_import_bytes", "uss_bytes", "pss_bytes", "rss_anon_bytes", "rss_file_bytes", "baseline_anon_bytes", "partition_resident_bytes", "process_cpu_seconds", "stage_cpu_seconds", "stage_calls", "integrity", "restarts", "in_flight", "serving", "dataset_path", "metrics_port", "heap_releases", "heap_released_bytes")
    class StageCpuSecondsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class StageCallsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    VERTICES_SERVED_FIELD_NUMBER: _ClassVar[int]
    EDGES_SERVED_FIELD_NUMBER: _ClassVar[int]
    BUSY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    PART_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_PARTS_FIELD_NUMBER: _ClassVar[int]
    NUM_VERTICES_FIELD_NUMBER: _ClassVar[int]
    NUM_EDGES_FIELD_NUMBER: _ClassVar[int]
    PARTITION_BYTES_FIELD_NUMBER: _ClassVar[int]
    UPTIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EDGE_TYPES_FIELD_NUMBER: _ClassVar[int]
    WEIGHTED_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMPED_FIELD_NUMBER: _ClassVar[int]
    FEATURE_DIM_FIELD_NUMBER: _ClassVar[int]
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    RSS_BASELINE_BYTES_FIELD_NUMBER: _ClassVar[int]
    RSS_IMPORT_BYTES_FIELD_NUMBER: _ClassVar[int]
    USS_BYTES_FIELD_NUMBER: _ClassVar[int]
    PSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    RSS_ANON_BYTES_FIELD_NUMBER: _ClassVar[int]
    RSS_FILE_BYTES_FIELD_NUMBER: _ClassVar[int]
    BASELINE_ANON_BYTES_FIELD_NUMBER: _ClassVar[int]
    PARTITION_RESIDENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROCESS_CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STAGE_CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STAGE_CALLS_FIELD_NUMBER: _ClassVar[int]
    INTEGRITY_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    SERVING_FIELD_NUMBER: _ClassVar[int]
    DATASET_PATH_FIELD_NUMBER: _ClassVar[int]
    METRICS_PORT_FIELD_NUMBER: _ClassVar[int]
    HEAP_RELEASES_FIELD_NUMBER: _ClassVar[int]
    HEAP_RELEASED_BYTES_FIELD_NUMBER: _ClassVar[int]
    requests: int
    vertices_served: int
    edges_served: int
    busy_seconds: float
    rss_bytes: int
    dataset: str
    run: str
    part_id: int
    num_parts: int
    num_vertices: int
    num_edges: int
    partition_bytes: int
    uptime_seconds: float
    edge_types: _containers.RepeatedScalarFieldContainer[str]
    weighted: bool
    timestamped: bool
    feature_dim: int
    format_version: int
    rss_baseline_bytes: int
    rss_import_bytes: int
    uss_bytes: int
    pss_bytes: int
    rss_anon_bytes: int
    rss_file_bytes: int
    baseline_anon_bytes: int
    partition_resident_bytes: int
    process_cpu_seconds: float
    stage_cpu_seconds: _containers.ScalarMap[str, float]
    stage_calls: _containers.ScalarMap[str, int]
    integrity: str
    restarts: int
    in_flight: int
    serving: bool
    dataset_path: str
    metrics_port: int
    heap_releases: int
    heap_released_bytes: int
    def __init__(self, requests: _Optional[int] = ..., vertices_served: _Optional[int] = ..., edges_served: _Optional[int] = ..., busy_seconds: _Optional[float] = ..., rss_bytes: _Optional[int] = ..., dataset: _Optional[str] = ..., run: _Optional[str] = ..., part_id: _Optional[int] = ..., num_parts: _Optional[int] = ..., num_vertices: _Optional[int] = ..., num_edges: _Optional[int] = ..., partition_bytes: _Optional[int] = ..., uptime_seconds: _Optional[float] = ..., edge_types: _Optional[_Iterable[str]] = ..., weighted: _Optional[bool] = ..., timestamped: _Optional[bool] = ..., feature_dim: _Optional[int] = ..., format_version: _Optional[int] = ..., rss_baseline_bytes: _Optional[int] = ..., rss_import_bytes: _Optional[int] = ..., uss_bytes: _Optional[int] = ..., pss_bytes: _Optional[int] = ..., rss_anon_bytes: _Optional[int] = ..., rss_file_bytes: _Optional[int] = ..., baseline_anon_bytes: _Optional[int] = ..., partition_resident_bytes: _Optional[int] = ..., process_cpu_seconds: _Optional[float] = ..., stage_cpu_seconds: _Optional[_Mapping[str, float]] = ..., stage_calls: _Optional[_Mapping[str, int]] = ..., integrity: _Optional[str] = ..., restarts: _Optional[int] = ..., in_flight: _Optional[int] = ..., serving: _Optional[bool] = ..., dataset_path: _Optional[str] = ..., metrics_port: _Optional[int] = ..., heap_releases: _Optional[int] = ..., heap_released_bytes: _Optional[int] = ...) -> None: ...

class ReloadRequest(_message.Message):
    __slots__ = ("dataset", "run", "prepare_only")
    DATASET_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    PREPARE_ONLY_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    run: str
    prepare_only: bool
    def __init__(self, dataset: _Optional[str] = ..., run: _Optional[str] = ..., prepare_only: _Optional[bool] = ...) -> None: ...

class ReloadResponse(_message.Message):
    __slots__ = ("version", "previous", "run", "dataset_path")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    DATASET_PATH_FIELD_NUMBER: _ClassVar[int]
    version: str
    previous: str
    run: str
    dataset_path: str
    def __init__(self, version: _Optional[str] = ..., previous: _Optional[str] = ..., run: _Optional[str] = ..., dataset_path: _Optional[str] = ...) -> None: ...

class RoutingRequest(_message.Message):
    __slots__ = ("chunk", "owners", "owner_direction")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    OWNER_DIRECTION_FIELD_NUMBER: _ClassVar[int]
    chunk: int
    owners: bool
    owner_direction: Direction
    def __init__(self, chunk: _Optional[int] = ..., owners: _Optional[bool] = ..., owner_direction: _Optional[_Union[Direction, str]] = ...) -> None: ...

class RoutingChunk(_message.Message):
    __slots__ = ("part_id", "num_parts", "num_vertices", "run", "run_fingerprint", "schema_json", "split_owner_vertices", "replica_gids", "master_gids", "master_out_degree", "master_in_degree", "owner_gids", "master_vtype", "edge_triples")
    PART_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_PARTS_FIELD_NUMBER: _ClassVar[int]
    NUM_VERTICES_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    RUN_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    SPLIT_OWNER_VERTICES_FIELD_NUMBER: _ClassVar[int]
    REPLICA_GIDS_FIELD_NUMBER: _ClassVar[int]
    MASTER_GIDS_FIELD_NUMBER: _ClassVar[int]
    MASTER_OUT_DEGREE_FIELD_NUMBER: _ClassVar[int]
    MASTER_IN_DEGREE_FIELD_NUMBER: _ClassVar[int]
    OWNER_GIDS_FIELD_NUMBER: _ClassVar[int]
    MASTER_VTYPE_FIELD_NUMBER: _ClassVar[int]
    EDGE_TRIPLES_FIELD_NUMBER: _ClassVar[int]
    part_id: int
    num_parts: int
    num_vertices: int
    run: str
    run_fingerprint: str
    schema_json: str
    split_owner_vertices: int
    replica_gids: Array
    master_gids: Array
    master_out_degree: Array
    master_in_degree: Array
    owner_gids: Array
    master_vtype: Array
    edge_triples: Array
    def __init__(self, part_id: _Optional[int] = ..., num_parts: _Optional[int] = ..., num_vertices: _Optional[int] = ..., run: _Optional[str] = ..., run_fingerprint: _Optional[str] = ..., schema_json: _Optional[str] = ..., split_owner_vertices: _Optional[int] = ..., replica_gids: _Optional[_Union[Array, _Mapping]] = ..., master_gids: _Optional[_Union[Array, _Mapping]] = ..., master_out_degree: _Optional[_Union[Array, _Mapping]] = ..., master_in_degree: _Optional[_Union[Array, _Mapping]] = ..., owner_gids: _Optional[_Union[Array, _Mapping]] = ..., master_vtype: _Optional[_Union[Array, _Mapping]] = ..., edge_triples: _Optional[_Union[Array, _Mapping]] = ...) -> None: ...

class HeldOutRequest(_message.Message):
    __slots__ = ("chunk",)
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    chunk: int
    def __init__(self, chunk: _Optional[int] = ...) -> None: ...

class HeldOutChunk(_message.Message):
    __slots__ = ("total", "src", "dst", "etype", "split")
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    ETYPE_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    total: int
    src: Array
    dst: Array
    etype: Array
    split: Array
    def __init__(self, total: _Optional[int] = ..., src: _Optional[_Union[Array, _Mapping]] = ..., dst: _Optional[_Union[Array, _Mapping]] = ..., etype: _Optional[_Union[Array, _Mapping]] = ..., split: _Optional[_Union[Array, _Mapping]] = ...) -> None: ...

class EmbedCreateRequest(_message.Message):
    __slots__ = ("table", "dim", "seed", "lr", "eps", "version")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    LR_FIELD_NUMBER: _ClassVar[int]
    EPS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    table: str
    dim: int
    seed: int
    lr: float
    eps: float
    version: str
    def __init__(self, table: _Optional[str] = ..., dim: _Optional[int] = ..., seed: _Optional[int] = ..., lr: _Optional[float] = ..., eps: _Optional[float] = ..., version: _Optional[str] = ...) -> None: ...

class EmbedCreateResponse(_message.Message):
    __slots__ = ("rows", "bytes", "existed")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    rows: int
    bytes: int
    existed: bool
    def __init__(self, rows: _Optional[int] = ..., bytes: _Optional[int] = ..., existed: _Optional[bool] = ...) -> None: ...

class EmbedFetchRequest(_message.Message):
    __slots__ = ("table", "vertices", "snapshot")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    VERTICES_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    table: str
    vertices: Array
    snapshot: bool
    def __init__(self, table: _Optional[str] = ..., vertices: _Optional[_Union[Array, _Mapping]] = ..., snapshot: _Optional[bool] = ...) -> None: ...

class EmbedFetchResponse(_message.Message):
    __slots__ = ("rows",)
    ROWS_FIELD_NUMBER: _ClassVar[int]
    rows: Array
    def __init__(self, rows: _Optional[_Union[Array, _Mapping]] = ...) -> None: ...

class EmbedUpdateRequest(_message.Message):
    __slots__ = ("table", "vertices", "grads")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    VERTICES_FIELD_NUMBER: _ClassVar[int]
    GRADS_FIELD_NUMBER: _ClassVar[int]
    table: str
    vertices: Array
    grads: Array
    def __init__(self, table: _Optional[str] = ..., vertices: _Optional[_Union[Array, _Mapping]] = ..., grads: _Optional[_Union[Array, _Mapping]] = ...) -> None: ...

class EmbedUpdateResponse(_message.Message):
    __slots__ = ("rows",)
    ROWS_FIELD_NUMBER: _ClassVar[int]
    rows: int
    def __init__(self, rows: _Optional[int] = ...) -> None: ...

class EmbedControlRequest(_message.Message):
    __slots__ = ("table", "action")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    table: str
    action: str
    def __init__(self, table: _Optional[str] = ..., action: _Optional[str] = ...) -> None: ...

class EmbedControlResponse(_message.Message):
    __slots__ = ("done",)
    DONE_FIELD_NUMBER: _ClassVar[int]
    done: bool
    def __init__(self, done: _Optional[bool] = ...) -> None: ...
