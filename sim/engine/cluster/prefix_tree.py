"""The ``cache-aware`` router's approximate tree of what it has sent where (SGLang's router).

SGLang's router (sgl-router / sgl-model-gateway, ``--policy cache_aware``) never asks a worker
what it caches: it keeps one radix tree of the request texts it has routed, each node marked
with the workers (tenants) it sent that text to and when, and guesses that a worker still
caches what it was sent. This is that tree, for kvsim's requests.

*Unit: tokens.* SGLang matches raw text characters (to skip tokenizing); kvsim's requests
carry symbolic tokens (sim/request.py: segments ``(segment_id, length)``, token ``k`` of a
segment being ``(segment_id, k)``), which is what two prompts share or not, so the tree
matches on those tokens. The quantities SGLang derives are ratios (matched / prompt length)
and per-worker sizes, and characters are roughly proportional to tokens, so only
``max_tree_size`` changes meaning: tokens per worker instead of characters.

A node's label is a tuple of runs ``(segment_id, start, length)`` (tokens ``start ..
start+length-1`` of that segment); its children are keyed by their first token. As in
SGLang:

* ``insert``: walk the prompt down the tree, splitting a node where the prompt leaves its
  label, and mark every node on the path with the worker (a worker's size grows by a node's
  length the first time it is marked there);
* ``match``: the longest prefix of the prompt anywhere in the tree (whichever workers hold
  it), and one worker of the deepest node reached (SGLang takes the first in its map, an
  arbitrary one; here the most recently marked, deterministic), whose marks on the path are
  refreshed;
* ``evict(max_size)``: for every worker above ``max_size`` tokens, unmark its least recently
  used leaves (the nodes it marks with no child it marks) one at a time, oldest first, a
  parent joining the queue once it becomes the worker's leaf, until it is within the size;
  nodes no worker marks go. The router calls it every ``eviction_interval_s``.

Access times are a counter (one tick per insert or match), the order SGLang's millisecond
clock gives when no two requests share a millisecond.
"""

from __future__ import annotations

import heapq

Run = tuple[int, int, int]  # (segment_id, start, length)


def prompt_runs(segments: tuple[tuple[int, int], ...]) -> tuple[Run, ...]:
    """A prompt's runs: each segment from its first token."""
    return tuple((seg, 0, n) for seg, n in segments if n > 0)


def _length(runs) -> int:
    return sum(r[2] for r in runs)


def _common(a, b) -> int:
    """Tokens the run lists ``a`` and ``b`` share from their starts."""
    i = j = oa = ob = n = 0
    while i < len(a) and j < len(b):
        sa, sta, la = a[i]
        sb, stb, lb = b[j]
        if sa != sb or sta + oa != stb + ob:
            break
        take = min(la - oa, lb - ob)
        n, oa, ob = n + take, oa + take, ob + take
        if oa == la:
            i, oa = i + 1, 0
        if ob == lb:
            j, ob = j + 1, 0
    return n


def _split(runs, k: int) -> tuple[tuple[Run, ...], tuple[Run, ...]]:
    """``runs``' first ``k`` tokens and the rest."""
    head: list[Run] = []
    for i, (seg, start, n) in enumerate(runs):
        if k <= 0:
            return tuple(head), tuple(runs[i:])
        if n <= k:
            head.append((seg, start, n))
            k -= n
        else:
            head.append((seg, start, k))
            return tuple(head), ((seg, start + k, n - k),) + tuple(runs[i + 1:])
    return tuple(head), ()


class _Node:
    __slots__ = ("label", "length", "children", "stamps", "parent")

    def __init__(self, label: tuple[Run, ...], parent: _Node | None) -> None:
        self.label, self.length = label, _length(label)
        self.children: dict[tuple[int, int], _Node] = {}  # first token (segment_id, offset) -> child
        self.stamps: dict[int, int] = {}  # worker -> last access
        self.parent = parent

    def key(self) -> tuple[int, int]:
        return self.label[0][0], self.label[0][1]


class PrefixTree:
    """One radix tree over ``num_workers`` workers (module docstring)."""

    def __init__(self, num_workers: int) -> None:
        self.root = _Node((), None)
        self.sizes = [0] * num_workers  # tokens each worker marks (SGLang's tenant_char_count)
        self._clock = 0

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def insert(self, runs: tuple[Run, ...], worker: int) -> None:
        now, node = self._tick(), self.root
        node.stamps[worker] = now
        rest = runs
        while rest:
            child = node.children.get((rest[0][0], rest[0][1]))
            if child is None:
                leaf = _Node(rest, node)
                node.children[leaf.key()] = leaf
                leaf.stamps[worker] = now
                self.sizes[worker] += leaf.length
                return
            shared = _common(child.label, rest)
            if shared < child.length:  # the prompt leaves the label inside: split it there
                head, tail = _split(child.label, shared)
                mid = _Node(head, node)
                mid.stamps = dict(child.stamps)
                node.children[mid.key()] = mid
                child.label, child.length, child.parent = tail, child.length - shared, mid
                mid.children[child.key()] = child
                child = mid
            if worker not in child.stamps:
                self.sizes[worker] += child.length
            child.stamps[worker] = now
            node, rest = child, _split(rest, shared)[1]

    def match(self, runs: tuple[Run, ...]) -> tuple[int, int | None]:
        """(tokens of the prompt's longest prefix in the tree, a worker holding it) ((0, None)
        if none)."""
        node, rest, matched = self.root, runs, 0
        while rest:
            child = node.children.get((rest[0][0], rest[0][1]))
            if child is None:
                break
            shared = _common(child.label, rest)
            matched, node = matched + shared, child
            if shared < child.length:
                break
            rest = _split(rest, shared)[1]
        if not node.stamps or node is self.root:
            return 0, None
        worker = max(node.stamps, key=lambda w: (node.stamps[w], -w))
        now = self._tick()
        while node is not None:
            node.stamps[worker] = now
            node = node.parent
        return matched, worker

    def evict(self, max_size: int) -> None:
        """Unmark least recently used leaves of each worker above ``max_size`` tokens."""
        over = {w for w, size in enumerate(self.sizes) if size > max_size}
        if not over:
            return
        heap: list[tuple[int, int, int, _Node]] = []
        seq = 0
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            for w in over & node.stamps.keys():
                if self._is_leaf_of(node, w):
                    heap.append((node.stamps[w], w, seq, node))
                    seq += 1
        heapq.heapify(heap)
        while heap:
            _, w, _, node = heapq.heappop(heap)
            if self.sizes[w] <= max_size or w not in node.stamps:
                continue
            del node.stamps[w]
            self.sizes[w] -= node.length
            parent = node.parent
            if not node.children and not node.stamps:
                del parent.children[node.key()]
            if parent is not self.root and w in parent.stamps and self._is_leaf_of(parent, w):
                heapq.heappush(heap, (parent.stamps[w], w, seq, parent))
                seq += 1

    @staticmethod
    def _is_leaf_of(node: _Node, worker: int) -> bool:
        return all(worker not in c.stamps for c in node.children.values())

    def marked_tokens(self) -> list[int]:
        """Tokens each worker marks, counted over the whole tree (``sizes`` kept by hand)."""
        sizes = [0] * len(self.sizes)
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            for w in node.stamps:
                sizes[w] += node.length
        return sizes
