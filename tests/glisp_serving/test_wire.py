"""The direct wire encoding of Gather and Lookup is the protobuf encoding of sampling.proto.

Messages written by :func:`glisp_serving.wire.encode` must parse with the generated classes into the
same values, and messages the generated classes write must decode to the same arrays, so clients
and servers in any language interoperate with the service.
"""

from __future__ import annotations

import numpy as np
import pytest

from glisp_serving.proto import sampling_pb2 as pb
from glisp_serving.wire import (
    GATHER_REQUEST,
    GATHER_RESPONSE,
    LOOKUP_RESPONSE,
    WireError,
    decode,
    encode,
    from_array,
    to_array,
)


def test_gather_request_encodes_as_protobuf():
    seeds = np.array([3, 1 << 33, 0], np.int64)
    raw = encode(
        GATHER_REQUEST,
        seeds=seeds,
        fanout=7,
        type_fanouts=(("cites", 3), ("likes", -1)),
        method="weighted",
        direction=pb.IN,
        max_time=-5,
        seed=(1 << 64) - 3,
        edge_ids=True,
    )
    msg = pb.GatherRequest.FromString(raw)
    assert np.array_equal(from_array(msg.seeds, "seeds"), seeds)
    assert msg.fanout == 7 and msg.method == "weighted" and msg.direction == pb.IN and msg.edge_ids
    assert [(t.edge_type, t.fanout) for t in msg.type_fanouts] == [("cites", 3), ("likes", -1)]
    assert msg.HasField("max_time") and msg.max_time == -5 and msg.seed == (1 << 64) - 3
    back = decode(GATHER_REQUEST, msg.SerializeToString())
    assert back["type_fanouts"] == [("cites", 3), ("likes", -1)] and back["max_time"] == -5
    assert back["seed"] == (1 << 64) - 3 and np.array_equal(back["seeds"], seeds)
    assert "max_time" not in decode(GATHER_REQUEST, encode(GATHER_REQUEST, seeds=seeds))  # optional stays unset


@pytest.mark.parametrize("shape", [(5,), (0,), (4, 3)])
def test_gather_response_both_ways(shape):
    rng = np.random.default_rng(1)
    counts = rng.integers(0, 9, shape).astype(np.int32)
    nbrs = rng.integers(0, 1 << 30, int(counts.sum())).astype(np.int32)
    keys = -rng.random(len(nbrs)).astype(np.float32)
    eids = rng.integers(0, 1 << 45, len(nbrs))
    raw = encode(
        GATHER_RESPONSE,
        counts=counts,
        neighbors=nbrs,
        keys=keys,
        edge_ids=eids,
        merge="topk",
        fanouts=np.array([4, 2]),
        part_id=3,
    )
    msg = pb.GatherResponse.FromString(raw)
    assert np.array_equal(from_array(msg.counts, "counts"), counts)
    assert np.array_equal(from_array(msg.neighbors, "neighbors"), nbrs)
    assert np.array_equal(from_array(msg.keys, "keys"), keys) and np.array_equal(from_array(msg.edge_ids, "e"), eids)
    assert msg.merge == "topk" and list(msg.fanouts) == [4, 2] and msg.part_id == 3
    ref = pb.GatherResponse(counts=to_array(counts), neighbors=to_array(nbrs), merge="concat", part_id=1)
    got = decode(GATHER_RESPONSE, ref.SerializeToString())
    assert got["counts"].shape == counts.shape and np.array_equal(got["counts"], counts)
    assert np.array_equal(got["neighbors"], nbrs) and got["merge"] == "concat" and "keys" not in got


def test_lookup_response_features_are_views_of_the_bytes():
    feats = np.arange(24, dtype=np.float32).reshape(6, 4)
    raw = encode(LOOKUP_RESPONSE, features=feats, labels=np.arange(6), split=np.zeros(6, np.int8))
    got = decode(LOOKUP_RESPONSE, raw)
    assert np.array_equal(got["features"], feats) and got["features"].base is not None  # no copy
    assert np.array_equal(from_array(pb.LookupResponse.FromString(raw).features, "f"), feats)


def test_malformed_messages_are_wire_errors():
    good = encode(GATHER_RESPONSE, counts=np.array([1, 2], np.int32), neighbors=np.array([5, 6, 7], np.int32))
    with pytest.raises(WireError, match="runs past the end|truncated"):
        decode(GATHER_RESPONSE, good[:-3])
    bad = pb.GatherResponse(counts=pb.Array(data=b"\x00" * 7, dtype="<i4", shape=[2])).SerializeToString()
    with pytest.raises(WireError, match="counts: 7 bytes do not hold shape"):
        decode(GATHER_RESPONSE, bad)
    with pytest.raises(WireError, match="dtype must be one of"):
        decode(GATHER_RESPONSE, pb.GatherResponse(counts=pb.Array(data=b"", dtype="<U3")).SerializeToString())
