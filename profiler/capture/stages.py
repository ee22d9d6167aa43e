"""Frames: sibling stage ranges that repeat as a whole, with no range around them.

A pipeline ranged per stage (``read``, ``preprocess``, ``backbone``, ``head``, ``nms``, ``draw`` once per frame,
304 frames) has no range for its iteration: read as it is, each stage is a repeated range of its own and the
busiest stage would be taken for the inference. When the outermost ranges of a thread (or the ranges directly
inside one-off ranges of that thread: ``main`` around the loop) are the same stages in the same order, repeated
``FRAME_MIN_REPEATS`` times or more, each repetition becomes a range ``(frame)`` from its first stage's start to
its last stage's end: the stages are its layers, and what the thread launches between them is the frame's too.

The stages are the ranges of that level that occur the most common number of times (``FRAME_MIN_REPEATS`` or
more): at least ``FRAME_MIN_STAGES`` of them (two alternating ranges, a request and a sync point, are no pipeline
of stages), each once in every repetition and in the order of the first; a frame begins after the one before it
ends, and the stages make ``FRAME_MIN_LEVEL_SHARE`` of the level's ranges in the frames' span. A stage in another order in one repetition and no frame is made: the stages stay as they are. A range
that occurs otherwise (a stage skipped once, a periodic checkpoint) is no stage, and falls inside a frame or
between two.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

FRAME_NAME = "(frame)"
"""The name of the range made for each repetition of a thread's stage ranges."""
FRAME_MIN_STAGES = 3
"""Distinct stages a repeated sequence must have to be a frame."""
FRAME_MIN_REPEATS = 3
"""Repetitions of the whole sequence a frame needs."""
FRAME_MIN_LEVEL_SHARE = 0.9
"""Share of the level's ranges from the first frame's start to the last one's end that must be stages: the ops of
a training step ranged one by one (aten::*) hold sequences that repeat, among many other ops."""
FRAME_SEARCH_LEVELS = 3
"""How deep one-off ranges are looked into for the stages (``main`` > ``run`` > stages)."""
FRAME_MAX_ONE_OFF = 16
"""One-off ranges of a level looked into, at most (more: the level is a list of distinct steps, no wrapper)."""


def stage_frames(ranges: Any) -> Any:
    """``ranges`` (:class:`~profiler.capture.series.Ranges`) with a ``(frame)`` range per repetition of the stage
    sequence of each thread that has one (see the module docstring); else ``ranges`` itself."""
    rf = ranges.frame
    if len(rf) < FRAME_MIN_STAGES * FRAME_MIN_REPEATS:
        return ranges
    pair = rf["domain"].to_numpy() * (len(ranges.names) + 1) + rf["name"].to_numpy()
    count = pd.Series(pair).map(pd.Series(pair).value_counts()).to_numpy()
    found = []  # (tid, stage pairs in order, [(start, end)] per frame)
    for tid, rows in pd.Series(np.arange(len(rf))).groupby(rf["tid"].to_numpy()):
        got = _frames_of_thread(rf, rows.to_numpy(), pair, count)
        if got is not None:
            found.append((int(tid), *got))
    if not found:
        return ranges
    return _with_frames(ranges, found)


def _frames_of_thread(rf: pd.DataFrame, rows: np.ndarray, pair: np.ndarray, count: np.ndarray
                      ) -> tuple[tuple[int, ...], list[tuple[int, int]]] | None:
    """The stage sequence and the frames of one thread's ranges (``rows``), or None."""
    start, end = rf["start_ns"].to_numpy()[rows], rf["end_ns"].to_numpy()[rows]
    order = np.lexsort((-end, start))
    rows, start, end = rows[order], start[order], end[order]
    group = np.zeros(len(rows), np.int64)  # which one-off range the level is inside (0: none)
    level = np.ones(len(rows), dtype=bool)
    for _ in range(FRAME_SEARCH_LEVELS):
        top = _outermost(start, end, group, level)
        got = _repeated_sequence(rows[top], pair, start[top], end[top])
        if got is not None:
            return got
        once = top[count[rows[top]] == 1]  # look inside the one-off ranges of this level
        if not len(once) or len(once) > FRAME_MAX_ONE_OFF:
            return None
        inside = np.zeros(len(rows), np.int64)
        for k, i in enumerate(once, start=1):
            inside[(start >= start[i]) & (end <= end[i]) & (np.arange(len(rows)) != i) & level] = k
        level = inside > 0
        group = inside
    return None


def _outermost(start: np.ndarray, end: np.ndarray, group: np.ndarray, level: np.ndarray) -> np.ndarray:
    """Positions (into the sorted rows) of the ranges of ``level`` not inside another of the same group."""
    idx = np.flatnonzero(level)
    if not len(idx):
        return idx
    g = group[idx]
    o = np.argsort(g, kind="stable")  # rows stay in start order within each group
    idx, g = idx[o], g[o]
    reach = pd.Series(end[idx]).groupby(g).cummax().to_numpy()
    new_group = np.concatenate(([True], g[1:] != g[:-1]))
    prev_reach = np.concatenate(([np.iinfo(np.int64).min], reach[:-1]))
    keep = new_group | (start[idx] >= prev_reach)
    return np.sort(idx[keep])


def _repeated_sequence(rows: np.ndarray, pair: np.ndarray, start: np.ndarray, end: np.ndarray
                       ) -> tuple[tuple[int, ...], list[tuple[int, int]]] | None:
    """(stage pairs in order, frames) when the ranges ``rows`` (in start order) hold stages repeated as a whole."""
    p = pair[rows]
    uniq, n = np.unique(p, return_counts=True)
    repeated = n >= FRAME_MIN_REPEATS
    if np.count_nonzero(repeated) < FRAME_MIN_STAGES:
        return None
    reps = int(np.bincount(n[repeated]).argmax())  # the most common repetition count among repeated ranges
    stages = uniq[n == reps]
    if len(stages) < FRAME_MIN_STAGES:
        return None
    mine = np.isin(p, stages)
    first, last = start[mine].min(), end[mine].max()
    span = (start >= first) & (start < last)
    if np.count_nonzero(mine) < FRAME_MIN_LEVEL_SHARE * np.count_nonzero(span):
        return None  # other ranges of the level run among them: a subset of a program's ops, no stages
    seq = p[mine]
    k = len(stages)
    blocks = seq.reshape(reps, k)
    if not (blocks == blocks[0]).all() or len(set(blocks[0].tolist())) != k:
        return None
    s, e = start[mine].reshape(reps, k), end[mine].reshape(reps, k)
    if (s[1:, 0] < e[:-1].max(axis=1)).any():  # a frame begins before the one before it has ended
        return None
    return tuple(int(x) for x in blocks[0]), [(int(a), int(b)) for a, b in zip(s[:, 0], e.max(axis=1))]


def _with_frames(ranges: Any, found: list[tuple[int, tuple[int, ...], list[tuple[int, int]]]]) -> Any:
    """The ranges with the frames added (one series per distinct stage sequence; the first ``(frame)``)."""
    domains = np.asarray(ranges.domains, dtype=object)
    names = list(np.asarray(ranges.names, dtype=object))
    empty = np.flatnonzero(domains == "")
    if len(empty):
        dom = int(empty[0])
    else:
        domains, dom = np.append(domains, ""), len(domains)
    width = len(ranges.names) + 1
    sequences: dict[tuple[int, ...], int] = {}
    made = dict(getattr(ranges, "made_from", {}) or {})
    parts = []
    for tid, seq, frames in found:
        if seq not in sequences:
            label = FRAME_NAME if not sequences else f"{FRAME_NAME[:-1]} {len(sequences) + 1})"
            names.append(label)
            sequences[seq] = len(names) - 1
            stage_names = [_label(domains[x // width], ranges.names[x % width]) for x in seq]
            made[label] = ("one range per repetition of the stage ranges " + " > ".join(stage_names)
                           + f" ({len(frames)} on its thread), which no range encloses")
        a = np.array([f[0] for f in frames], np.int64)
        b = np.array([f[1] for f in frames], np.int64)
        parts.append(pd.DataFrame({"domain": np.full(len(a), dom, np.int64),
                                   "name": np.full(len(a), sequences[seq], np.int64),
                                   "raw_name": np.full(len(a), -1, np.int64), "start_ns": a, "end_ns": b,
                                   "tid": np.full(len(a), tid, np.int64), "number": np.full(len(a), -1, np.int64)}))
    frame = pd.concat([ranges.frame, *parts], ignore_index=True)
    return replace(ranges, frame=frame, domains=domains, names=np.asarray(names, dtype=object), made_from=made)


def _label(domain: Any, name: Any) -> str:
    return f"{domain}:{name}" if domain else str(name)
