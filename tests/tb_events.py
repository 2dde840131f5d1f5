"""Reading TensorBoard event files back, for the tests of `nmt.tensorboard.TensorBoardWriter` (tensorboard's own
reader is not a dependency: it comes with the viewer, which training does not need)."""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Dict, List, Tuple


def read_tensorboard(logdir: Path) -> Tuple[Dict[str, List[Tuple[int, float]]], Dict[str, List[Tuple[int, str]]]]:
    """(scalars, texts) of the event files in `logdir`, each tag's (step, value) in order of writing, with
    TensorBoard's purge rule applied (a run started with `purge_step` S drops the earlier events at steps >= S).
    Reads the TFRecord framing itself and parses with tensorboardX's own protobuf classes."""
    from tensorboardX.proto.event_pb2 import Event
    events = []
    for path in Path(logdir).glob("events.out.tfevents.*"):
        data, pos = path.read_bytes(), 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            record = data[pos + 12:pos + 12 + length]
            pos += 12 + length + 4
            if len(record) < length:   # a torn last record
                break
            events.append(Event.FromString(record))
    scalars: Dict[str, List[Tuple[float, int, float]]] = {}
    texts: Dict[str, List[Tuple[float, int, str]]] = {}
    for ev in sorted(events, key=lambda e: e.wall_time):
        if ev.HasField("session_log") and ev.session_log.status == ev.session_log.START:
            for series in (*scalars.values(), *texts.values()):
                series[:] = [x for x in series if x[1] < ev.step]
        if not ev.HasField("summary"):
            continue
        for v in ev.summary.value:
            if v.HasField("simple_value"):
                scalars.setdefault(v.tag, []).append((ev.wall_time, ev.step, v.simple_value))
            elif v.HasField("tensor") and v.tensor.string_val:
                tag = v.tag[:-len("/text_summary")] if v.tag.endswith("/text_summary") else v.tag
                texts.setdefault(tag, []).append((ev.wall_time, ev.step, v.tensor.string_val[0].decode("utf-8")))
    strip = lambda d: {k: [(s, x) for _, s, x in v] for k, v in d.items()}  # noqa: E731
    return strip(scalars), strip(texts)
