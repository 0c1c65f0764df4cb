"""Chained hashes of full KV blocks, computed from a request's symbolic token segments.

Block ``i`` covers tokens ``[i*B, (i+1)*B)``; its hash folds in the previous block's hash,
so equal hashes mean equal *prefixes*, not just equal blocks (vLLM's prefix-cache key).
A block's content is the list of segment pieces ``(segment_id, offset, length)`` it
covers. Python's ``hash`` of tuples of ints is deterministic across runs.
"""

from __future__ import annotations

from sim.request import Request

#: (segment id, block size) -> the chained hashes of the full blocks at the start of a
#: sequence that begins with that segment: they depend on nothing else, and a shared system
#: prompt begins many requests. Cleared when it would hold more than MEMO_BLOCKS hashes
#: (unshared first segments would fill it otherwise).
_FIRST: dict[tuple[int, int], list[int]] = {}
MEMO_BLOCKS = 1 << 16
_memo_blocks = [0]  # hashes held in _FIRST


def extend_block_hashes(req: Request, num_full_blocks: int, block_size: int) -> list[int]:
    """Make ``req.block_hashes`` cover at least ``num_full_blocks`` blocks; return it.

    Only blocks whose tokens are all known are hashed (callers ask for no more).
    """
    hashes = req.block_hashes
    start_block = len(hashes)
    if num_full_blocks <= start_block:
        return hashes
    pos = start_block * block_size  # first token to hash
    end = num_full_blocks * block_size
    prompt = req.num_prompt_tokens
    if prompt <= pos and end <= prompt + req.num_generated:  # blocks of output only (decodes)
        seg = req.output_segment  # each block one piece: the loop below's, without the walk
        prev = hashes[-1] if hashes else 0
        while pos < end:
            prev = hash((prev, ((seg, pos - prompt, block_size),)))
            hashes.append(prev)
            pos += block_size
        return hashes
    if not start_block:  # the blocks inside the first segment: hashed once for every request that begins with it
        first_id, first_len = req.prompt_segments[0] if req.prompt_segments else (0, 0)
        inside = first_len // block_size
        if inside > 1:
            key = (first_id, block_size)
            memo = _FIRST.get(key)
            if memo is None or len(memo) < inside:
                prev = memo[-1] if memo else 0
                memo = list(memo) if memo else []
                for i in range(len(memo), inside):
                    prev = hash((prev, ((first_id, i * block_size, block_size),)))
                    memo.append(prev)
                held = _memo_blocks[0] + inside - (len(_FIRST[key]) if key in _FIRST else 0)
                if held > MEMO_BLOCKS:
                    _FIRST.clear()
                    held = inside
                _FIRST[key] = memo
                _memo_blocks[0] = held
            hashes += memo[:inside if inside < num_full_blocks else num_full_blocks]
            start_block = len(hashes)
            if num_full_blocks <= start_block:
                return hashes
            pos = start_block * block_size
    seg_start = 0
    pieces: list[tuple[int, int, int]] = []
    prev = hashes[-1] if hashes else 0
    block_end = pos + block_size
    for seg_id, seg_len in req.segments():
        seg_end = seg_start + seg_len
        while pos < end and pos < seg_end:
            take = min(seg_end, block_end) - pos
            pieces.append((seg_id, pos - seg_start, take))
            pos += take
            if pos == block_end:
                prev = hash((prev, tuple(pieces)))
                hashes.append(prev)
                pieces = []
                block_end += block_size
        seg_start = seg_end
        if pos >= end:
            break
    return hashes
