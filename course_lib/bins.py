"""Bin packing of lengths: which documents share a row of ``capacity`` tokens.

Rows are bins, documents are items (:mod:`course_lib.packing` explains the two strategies and
builds the packed batch from the rows chosen here). This module needs only numpy, so the
fine-tune planner packs a length distribution (``python -m course_lib plan --packing``)
without importing torch.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import numpy as np

from course_lib._checks import one_of, positive_int

STRATEGIES = ("bfd", "greedy")
SPLITS = (None, "chunk")


def _check_capacity(capacity) -> int:
    if isinstance(capacity, np.integer):
        capacity = int(capacity)
    return positive_int("capacity", capacity, "tokens per row")


def pack_lengths(
    lengths: Sequence[int] | np.ndarray,
    capacity: int,
    strategy: str = "bfd",
    split: str | None = None,
) -> list[list[int]]:
    """Assign sequence indices to rows of ``capacity`` tokens.

    Every index appears exactly once and no row holds more than ``capacity`` tokens; nothing is
    dropped or truncated. A length ≤ 0 raises ``ValueError``; so does a length > ``capacity``,
    unless ``split="chunk"``: then sequence ``i`` of length ``L`` becomes ``L // capacity`` full
    rows plus a remainder packed like any other item, and ``i`` appears once per piece, the k-th
    appearance (rows read in order) being tokens ``[k * capacity, (k + 1) * capacity)``.

    ``"bfd"`` runs in O(n log n + n): it sorts once, then places all items of one length in bulk,
    keeping rows grouped by remaining room (a sorted list of at most ``capacity`` values).

    Args:
        lengths: tokens of each sequence, 1-D ints.
        capacity: tokens per row.
        strategy: ``"bfd"`` (best-fit decreasing) or ``"greedy"`` (next-fit in the given order).
        split: ``None`` (a sequence longer than ``capacity`` is an error) or ``"chunk"``.

    Returns:
        One list per row of the sequence indices it holds, in placement order; the fill fraction
        is ``sum(lengths) / (len(rows) * capacity)``.

    Raises:
        ValueError: a bad ``capacity``, strategy or split, lengths that are not 1-D ints, a
            length below 1, or (without ``split='chunk'``) one above ``capacity``.
    """
    capacity = _check_capacity(capacity)
    one_of("strategy", strategy, STRATEGIES)
    one_of("split", split, SPLITS)
    arr = np.asarray(lengths)
    if arr.size == 0:
        return []
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(
            f"lengths must be a 1-D sequence of ints, got shape {arr.shape} dtype {arr.dtype}"
        )
    arr = arr.astype(np.int64)
    bad = np.flatnonzero(arr <= 0)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"sequence {i} has length {int(arr[i])}: every sequence needs at least "
            "one token; drop empty sequences before packing"
        )
    over = np.flatnonzero(arr > capacity)
    if over.size and split is None:
        i = int(over[0])
        raise ValueError(
            f"sequence {i} has {int(arr[i])} tokens, longer than capacity {capacity} "
            f"({over.size} such sequences); raise capacity, filter them out, or pass "
            "split='chunk' to cut them into capacity-sized documents"
        )
    if strategy == "greedy":
        return _next_fit(arr, capacity)
    full_rows: list[list[int]] = []
    for i in over.tolist():  # split == "chunk": full pieces first, so piece order = row order
        full_rows += [[i] for _ in range(int(arr[i]) // capacity)]
    pieces = np.where(arr > capacity, arr % capacity, arr)
    keep = np.flatnonzero(pieces > 0)
    return full_rows + _best_fit_decreasing(pieces[keep], keep, capacity)


def _next_fit(arr: np.ndarray, capacity: int) -> list[list[int]]:
    rows: list[list[int]] = []
    row: list[int] = []
    room = 0
    for i, n in enumerate(arr.tolist()):
        while n > 0:  # more than one pass only for split pieces
            piece = min(n, capacity)
            if piece > room:
                row = []
                rows.append(row)
                room = capacity
            row.append(i)
            room -= piece
            n -= piece
    return rows


def _best_fit_decreasing(lengths: np.ndarray, owners: np.ndarray, capacity: int) -> list[list[int]]:
    if lengths.size == 0:  # e.g. every sequence was an exact multiple of capacity (split="chunk")
        return []
    order = np.argsort(-lengths, kind="stable")
    sorted_len = lengths[order]
    owner_list = owners[order].tolist()
    starts = np.flatnonzero(np.r_[True, sorted_len[1:] != sorted_len[:-1]]).tolist()
    bounds = zip(starts, starts[1:] + [len(owner_list)])
    rows: list[list[int]] = []
    rows_by_room: dict[int, list[int]] = {}  # remaining room -> row ids with exactly that room
    rooms: list[int] = []  # sorted keys of rows_by_room

    def file_row(row_id: int, room: int) -> None:
        if room == 0:
            return  # a full row never takes another item
        if room not in rows_by_room:
            rows_by_room[room] = []
            bisect.insort(rooms, room)
        rows_by_room[room].append(row_id)

    for a, b in bounds:
        length = int(sorted_len[a])
        pos = a
        while pos < b:
            j = bisect.bisect_left(rooms, length)
            room = rooms[j] if j < len(rooms) else capacity
            # Best fit puts the next item in the tightest row that fits; once it does, that row
            # stays the tightest until less than `length` is left: it takes room // length items.
            per_row = room // length
            if j == len(rooms):  # no open row fits: open new rows
                while pos < b:
                    take = owner_list[pos : min(pos + per_row, b)]
                    rows.append(take)
                    pos += len(take)
                    file_row(len(rows) - 1, capacity - len(take) * length)
                break
            stack = rows_by_room[room]
            while stack and pos < b:
                row_id = stack.pop()
                take = owner_list[pos : min(pos + per_row, b)]
                rows[row_id].extend(take)
                pos += len(take)
                file_row(row_id, room - len(take) * length)  # < length: not reused for this length
            if not stack:
                del rows_by_room[room]
                del rooms[bisect.bisect_left(rooms, room)]  # j may have moved: file_row inserts
    return rows


def lower_bound_rows(lengths: Sequence[int] | np.ndarray, capacity: int) -> int:
    """``ceil(Σ lengths / capacity)``: no packing can use fewer rows.

    Args:
        lengths: tokens of each sequence.
        capacity: tokens per row.

    Returns:
        The fewest rows any packing could use (rows are only ever this full when no token of
        room is left over).
    """
    _check_capacity(capacity)
    return math.ceil(int(np.sum(np.asarray(lengths, dtype=np.int64))) / capacity)
