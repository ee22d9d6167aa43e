"""Numbered range names: ``Inference 0`` ... ``Inference 99`` are one series, ``Inference #``.

Applications often number their ranges (``Inference 12``, ``Run_3``, ``step[7]``, ``iter-40``, ``Forward 0``,
``batch[3]``, ``step_12``): read as they are, each number is a series of one instance and no range repeats. Names
that differ only by such a number are one series named with a placeholder (``#`` for the number), and each
instance keeps its number (``name_index``).

A number is an index, not part of a name, when (each a declared threshold below):

- it stands apart: bounded by the name's start or end or by a character that is neither a letter, a digit nor a
  dot (``conv1``, ``fp16``, ``resnet50``, ``sm80`` and ``layer4.2``, ``h.0``, ``v1.2`` keep their numbers);
- at least ``NUMBERED_MIN_NUMBERS`` distinct numbers take that place in names otherwise alike;
- the numbers label instances, not kinds of work: most numbers name one instance on each thread that uses them
  inside ranges of one name (``NUMBERED_MIN_SINGLE_SHARE``). The layers of a network (``layer_3``) run once in
  every ``infer`` range, so a capture of several inferences holds each of them several times in ranges of one
  name; ``Inference 0`` ... ``Inference 99`` inside each of ``Run 0`` ... ``Run 4`` are one per number in each;
- the numbers run densely (``NUMBERED_MIN_DENSITY``): 0, 1, 2, ... or every tenth step (0, 10, 20: the stride
  is their greatest common step), not an exporter's node numbers across kinds of layer (``Conv_0``, ``Conv_3``,
  ``Conv_7``, the numbers between them taken by other layers);
- the instances never overlap on a thread (iterations follow one another; a range is not nested in its sibling);
- they are no phases around loops: when most of them each hold a loop (``NUMBERED_LOOP_ITERATIONS`` or more
  direct children of one name, at least ``NUMBERED_LOOP_SHARE`` of their direct children, TensorRT's ranges not
  counted), the numbers name configurations or epochs (``bs=1``, ``bs=8`` ... around each one's timed loop;
  ``epoch 3`` around its steps): each stays a one-off range around its loop.

TensorRT's own ranges (its domain: layer names, enqueues) are never numbered series. When a name holds several
such numbers, the last one that qualifies is the index (``epoch 2 step 14``: the step, per epoch).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

PLACEHOLDER = "#"
"""What stands for the number in a numbered series' name."""
NUMBERED_MIN_NUMBERS = 3
"""Distinct numbers in one place of names otherwise alike before they are one numbered series."""
NUMBERED_MIN_SINGLE_SHARE = 0.5
"""Share of the (number, thread) pairs that must name exactly one instance: the number labels an instance."""
NUMBERED_MIN_DENSITY = 0.5
"""Share of the numbers from the first to the last (at their common stride) that must be there."""
NUMBERED_LOOP_ITERATIONS = 20
"""Direct children of one name that make an instance a phase around a loop, not an iteration ..."""
NUMBERED_LOOP_SHARE = 2 / 3
"""... when they make at least this share of its direct children (a forward pass's aten::linear ranges do not)."""
_NUMBER = re.compile(r"(?<![0-9A-Za-z.])[0-9]+(?![0-9A-Za-z.])")
"""A number standing apart in a name (see the module docstring)."""
_LAST = r"^(.*)(?<![0-9A-Za-z.])([0-9]+)(?![0-9A-Za-z.])(.*)$"
"""The last number standing apart in a name (the greedy head leaves it the last): head, number, tail."""
EXCLUDED_DOMAINS = ("TensorRT",)
"""Domains whose ranges are never numbered series (TensorRT names its layers after the network's nodes)."""


@dataclass
class Numbered:
    """The names after merging: ``code[old name code]`` is the new code into ``names``; ``number[old code]``
    the index the old name carried (-1 for a name that was not merged)."""

    names: np.ndarray
    code: np.ndarray
    number: np.ndarray
    merged: int  # how many series were made from numbered names


def number_places(name: str) -> list[tuple[int, int]]:
    """(start, end) of each number standing apart in ``name``."""
    return [m.span() for m in _NUMBER.finditer(name)]


def templates(name: str) -> list[str]:
    """``name`` with each one of its standalone numbers replaced by the placeholder (last place first): what
    ``--unit Inference 12`` may stand for."""
    return [name[:a] + PLACEHOLDER + name[b:] for a, b in reversed(number_places(name))]


def merge_numbered(names: np.ndarray, domain_of_name: np.ndarray, name_code: np.ndarray, tid: np.ndarray,
                   start_ns: np.ndarray, end_ns: np.ndarray, excluded: np.ndarray | None = None) -> Numbered:
    """Merge numbered names (see the module docstring). ``names`` are the distinct names; per row (range
    instance): ``name_code`` into them, ``tid``, ``start_ns``, ``end_ns``. ``domain_of_name`` is, per name, the
    domain it is used in (names used in several domains are left alone: -1); ``excluded`` marks names never
    merged."""
    n = len(names)
    code, number = np.arange(n, dtype=np.int64), np.full(n, -1, np.int64)
    out_names = list(np.asarray(names, dtype=object))
    merged = 0
    if n == 0 or not len(name_code):
        return Numbered(np.asarray(out_names, dtype=object), code, number, 0)
    ok = domain_of_name >= 0
    if excluded is not None:
        ok &= ~excluded
    text = pd.Series([str(x) for x in np.asarray(names, dtype=object)[ok]], index=np.flatnonzero(ok), dtype=object)
    text = text[text.str.contains(r"[0-9]", regex=True)]
    parts = text.str.extract(_LAST).dropna()
    parts = parts[parts[1].str.len() <= 18]  # an int64; longer digit runs are ids, no index
    if parts.empty:
        return Numbered(np.asarray(out_names, dtype=object), code, number, 0)
    found = pd.DataFrame({"i": parts.index.to_numpy(np.int64), "d": domain_of_name[parts.index.to_numpy()],
                          "t": (parts[0] + PLACEHOLDER + parts[2]).to_numpy(), "num": parts[1].astype(np.int64)})
    many = found.groupby(["d", "t"])["num"].transform("nunique") >= NUMBERED_MIN_NUMBERS
    candidates = {}
    for (dom, template), g in found[many.to_numpy()].groupby(["d", "t"]):
        if _dense(set(g["num"].tolist())):
            candidates[(int(dom), str(template))] = list(zip(g["i"].tolist(), g["num"].tolist()))
    keys = sorted(candidates, key=lambda k: k[1])
    group_of, num_of = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    for g, key in enumerate(keys):
        for i, num in candidates[key]:
            group_of[i], num_of[i] = g, num
    sel = np.flatnonzero(group_of[name_code] >= 0)  # only the rows of candidate names are looked at
    c = name_code[sel]
    rows = pd.DataFrame({"g": group_of[c], "num": num_of[c], "t": tid[sel], "s": start_ns[sel], "e": end_ns[sel]})
    # a name already spelled with '#' in the same domain joins them
    spelled = pd.Index(np.asarray(names, dtype=object)).get_indexer([t for _, t in keys])
    level = None
    for g, group in rows.groupby("g"):
        level = level or _Level(name_code, tid, start_ns, end_ns, excluded, group_of)
        if not _is_index(group.assign(p=level.parent_name(group))) or level.hold_loops(group):
            continue
        dom, template = keys[int(g)]
        target = int(spelled[int(g)]) if spelled[int(g)] >= 0 and domain_of_name[spelled[int(g)]] == dom else None
        if target is None:
            out_names.append(template)
            target = len(out_names) - 1
        members = np.array([i for i, _ in candidates[keys[int(g)]]], dtype=np.int64)
        code[members], number[members] = target, num_of[members]
        merged += 1
    # names no row uses any more are left in place: the series are made from the codes the rows use
    return Numbered(np.asarray(out_names, dtype=object), code, number, merged)


def _dense(numbers: set[int]) -> bool:
    """Enough distinct numbers, and most of those from the first to the last at their common stride."""
    if len(numbers) < NUMBERED_MIN_NUMBERS:
        return False
    v = np.array(sorted(numbers), dtype=np.int64)
    stride = int(np.gcd.reduce(np.diff(v)))
    return len(v) >= NUMBERED_MIN_DENSITY * ((int(v[-1]) - int(v[0])) // stride + 1)


def _is_index(rows: pd.DataFrame) -> bool:
    """Whether the numbers of one template label instances: mostly one instance per (number, thread, name of the
    range around it: column p), and no two instances overlapping on a thread."""
    per = rows.groupby(["num", "t", "p"]).size().to_numpy()
    if not len(per) or np.count_nonzero(per == 1) < NUMBERED_MIN_SINGLE_SHARE * len(per):
        return False
    rows = rows.sort_values(["t", "s", "e"], kind="stable")
    tid, start = rows["t"].to_numpy(), rows["s"].to_numpy()
    reach = rows.groupby("t")["e"].cummax().to_numpy()  # the latest end so far on the thread
    return not ((tid[1:] == tid[:-1]) & (start[1:] < reach[:-1])).any()


class _Level:
    """Every range (name code, thread, start, end) sorted per thread, to look inside a group's instances."""

    def __init__(self, name_code: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray,
                 excluded: np.ndarray | None, group_of: np.ndarray) -> None:
        order = np.lexsort((-end, start, tid))
        self.code, self.tid, self.start, self.end = name_code[order], tid[order], start[order], end[order]
        # names of one numbered template count as one name (a loop of Inference 0 ... Inference 99)
        self.kind = np.where(group_of[self.code] >= 0, len(group_of) + group_of[self.code], self.code)
        self._parent: np.ndarray | None = None
        self.counted = ~excluded[self.code] if excluded is not None else np.ones(len(order), dtype=bool)
        self.threads, self.first = np.unique(self.tid, return_index=True)
        self.last = np.append(self.first[1:], len(self.tid))

    def parent_name(self, group: pd.DataFrame) -> np.ndarray:
        """Per row of ``group`` (columns t, s, e), the name code of the range directly around it (-1: none)."""
        if self._parent is None:
            from profiler.capture.keys import ThreadKeys, nesting

            keys = ThreadKeys([self.tid], [self.start, self.end])
            parent = nesting(keys, self.tid, self.start, self.end)[1]
            self._parent = np.where(parent >= 0, self.code[np.maximum(parent, 0)], -1)
        out = np.full(len(group), -1, np.int64)
        for t, g in group.groupby("t"):
            k = int(np.searchsorted(self.threads, t))
            a, b = int(self.first[k]), int(self.last[k])
            pos = a + np.searchsorted(self.start[a:b], g["s"].to_numpy(), "left")
            # the row itself: the first of its start with its end (outer ranges of one start come first)
            while True:
                off = (pos < b) & ((self.start[np.minimum(pos, b - 1)] != g["s"].to_numpy())
                                   | (self.end[np.minimum(pos, b - 1)] != g["e"].to_numpy()))
                off &= pos < b - 1
                if not off.any():
                    break
                pos = np.where(off, pos + 1, pos)
            out[np.flatnonzero(group["t"].to_numpy() == t)] = self._parent[np.minimum(pos, b - 1)]
        return out

    def hold_loops(self, group: pd.DataFrame) -> bool:
        """Whether most instances of ``group`` (columns t, s, e) each hold a loop among their direct children."""
        held = 0
        for t, g in group.groupby("t"):
            k = int(np.searchsorted(self.threads, t))
            a, b = int(self.first[k]), int(self.last[k])
            s = self.start[a:b]
            lo = np.searchsorted(s, g["s"].to_numpy(), "left")
            hi = np.searchsorted(s, g["e"].to_numpy(), "right")
            held += int(np.count_nonzero(self._loops(a, lo, hi, g["s"].to_numpy(), g["e"].to_numpy())))
        return held > 0.5 * len(group)

    def _loops(self, a: int, lo: np.ndarray, hi: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        """Per instance (windows [lo, hi) of its thread's rows from ``a``), whether its direct children hold a loop."""
        n = hi - lo
        who = np.repeat(np.arange(len(lo)), n)
        pos = a + np.repeat(lo, n) + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))
        inside = (self.end[pos] <= e[who]) & ~((self.start[pos] == s[who]) & (self.end[pos] == e[who]))
        who, pos = who[inside], pos[inside]
        if not len(pos):
            return np.zeros(len(lo), dtype=bool)
        reach = pd.Series(self.end[pos]).groupby(who).cummax().to_numpy()
        head = np.concatenate(([True], who[1:] != who[:-1]))
        direct = head | (self.start[pos] >= np.concatenate(([0], reach[:-1])))
        who, pos = who[direct], pos[direct]
        children = np.bincount(who, minlength=len(lo))
        mine = self.counted[pos]
        pairs = pd.DataFrame({"w": who[mine], "c": self.kind[pos][mine]}).value_counts()
        top = pairs.groupby(level=0).max().reindex(range(len(lo)), fill_value=0).to_numpy()
        return (top >= NUMBERED_LOOP_ITERATIONS) & (top >= NUMBERED_LOOP_SHARE * np.maximum(children, 1))
