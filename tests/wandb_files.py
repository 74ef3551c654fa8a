"""Read offline W&B runs back from their files (RUN_DIR/wandb/offline-run-*/run-*.wandb), for tests.

A .wandb file is W&B's transaction log: a 7-byte header (":W&B", magic 0xBEE1, version 0),
then LevelDB-log-style records in 32 KiB blocks (crc32, length, type: full/first/middle/last),
each a serialized wandb_internal_pb2.Record.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK, CHUNK_HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def raw_records(path: Path):
    data = Path(path).read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:7])
    assert ident == b":W&B" and magic == 0xBEE1, (ident, magic)
    pos, buf = 7, b""
    while pos + CHUNK_HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK_HEADER:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        pos += CHUNK_HEADER
        if length == 0 and kind == 0:  # block padding
            pos += left - CHUNK_HEADER
            continue
        chunk, pos = data[pos : pos + length], pos + length
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            buf = chunk
        elif kind == MIDDLE:
            buf += chunk
        elif kind == LAST:
            yield buf + chunk
            buf = b""


def read_run(run_file: Path) -> dict:
    """{name, group, job_type, tags, config, history (list of dicts), summary (dict)} of one offline run."""
    from wandb.proto import wandb_internal_pb2 as pb

    out = {"config": {}, "history": [], "summary": {}, "name": None, "group": None, "job_type": None, "tags": []}
    for raw in raw_records(run_file):
        rec = pb.Record()
        rec.ParseFromString(raw)
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            r = rec.run
            out.update(name=r.display_name, group=r.run_group, job_type=r.job_type, tags=list(r.tags))
            for item in r.config.update:
                out["config"][item.key] = json.loads(item.value_json)
        elif kind == "config":
            for item in rec.config.update:
                out["config"][item.key] = json.loads(item.value_json)
        elif kind == "history":
            out["history"].append({"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in rec.history.item})
        elif kind == "summary":
            for item in rec.summary.update:
                key = "/".join(item.nested_key) or item.key
                out["summary"][key] = json.loads(item.value_json)
    return out


def read_runs(run_dir: Path) -> list[dict]:
    return [read_run(f) for f in sorted(Path(run_dir).glob("wandb/offline-run-*/run-*.wandb"))]
