"""A read-only sequence whose items are built when read (a run's sessions, requests, steps)."""

from __future__ import annotations

from collections.abc import Sequence


class IndexedSequence(Sequence):
    """Subclasses give ``__len__`` and ``_item(i)`` for 0 <= i < len; negative indices,
    slices (a list) and out-of-range errors are handled here, as a list would."""

    _what = "item"  # named in the IndexError

    def _item(self, i: int):
        raise NotImplementedError

    def __getitem__(self, i):
        n = len(self)
        if isinstance(i, slice):
            return [self._item(j) for j in range(*i.indices(n))]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"{self._what} index out of range")
        return self._item(i)

    def __iter__(self):
        for i in range(len(self)):
            yield self._item(i)
