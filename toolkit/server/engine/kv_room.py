"""Room in the KV pool for what the engine runs: blocks counted before admitting a request, a block
for each running sequence's next position, and preemption when the pool is full.

As vLLM's scheduler does (recompute preemption): when a running sequence needs a block and none is
left, the sequence admitted last leaves its batch and gives its blocks back; it keeps its tokens,
sampling state and route, and resumes (its cached tokens run again, from cached prompt blocks where
they are still there) before any new request is admitted. The oldest sequence always goes on, so
every sequence ends. A seeded sequence draws the same random numbers after resuming; its keys and
values are recomputed, so its logprobs may differ in the last bits, as with another batch.
"""

from __future__ import annotations

from collections.abc import Iterable

from .kv_pool import KVPool, blocks_for
from .request import Request
from .running import Batch, Sequence


def admission_blocks(req: Request) -> int:
    """Blocks to count for admitting ``req``: its prompt, a copy of the prompt's last block for each
    further choice or beam, and one block to grow for each."""
    width = req.beam.width if req.beam else len(req.params)
    return blocks_for(len(req.prompt_ids)) + 2 * width - 1


def full_message(pool: KVPool, what: str) -> str:
    """Why ``what`` failed, and what to change."""
    return (
        f"the KV cache ({pool.tokens} tokens, {pool.budget} bytes) has no room for {what}: ask for fewer "
        "beams or tokens, or serve with more --kv-cache-memory-bytes"
    )


def resume_blocks(seq: Sequence) -> int:
    """Blocks a preempted sequence needs to resume and take its next step."""
    return blocks_for(seq.cached_len + 1)


class Preemption:
    """The preempted sequences of one engine, oldest first, and how many were preempted since start."""

    def __init__(self, pool: KVPool) -> None:
        self.pool = pool
        self.waiting: list[Sequence] = []
        self.count = 0

    def preempt(self, batches: dict[str, Batch], seq: Sequence) -> None:
        batches[seq.route.key].remove(seq, keep_route=True)
        self.waiting.append(seq)
        self.waiting.sort(key=lambda s: s.order)
        self.count += 1

    def claim(self, batches: dict[str, Batch]) -> None:
        """Make each running sequence's next position writable, oldest first, preempting the
        sequences admitted last while the pool is short."""
        running = sorted((s for b in batches.values() for s in b.seqs), key=lambda s: s.order)
        for seq in running:
            while seq in batches[seq.route.key].seqs and not self.pool.writable(seq.blocks, seq.cached_len):
                self.preempt(batches, self.newest(batches))

    def room(self, batches: dict[str, Batch], blocks: int) -> bool:
        """Preempt the sequences admitted last until ``blocks`` blocks are free; False if they
        cannot be (every sequence preempted)."""
        while self.pool.available < blocks:
            if not any(b.seqs for b in batches.values()):
                return False
            self.preempt(batches, self.newest(batches))
        return True

    @staticmethod
    def newest(batches: dict[str, Batch]) -> Sequence:
        return max((s for b in batches.values() for s in b.seqs), key=lambda s: s.order)

    def resumable(self, budget: int, running: int, max_seqs: int) -> list[Sequence]:
        """The preempted sequences to resume now, oldest first, within ``budget`` blocks and
        ``max_seqs`` running sequences (the oldest always, when nothing runs)."""
        chosen: list[Sequence] = []
        for seq in self.waiting:
            need = resume_blocks(seq)
            if (running or chosen) and (need > budget or running + len(chosen) >= max_seqs):
                break
            chosen.append(seq)
            budget -= need
        for seq in chosen:
            self.waiting.remove(seq)
        return chosen

    def drop(self, seqs: Iterable[Sequence]) -> None:
        """``seqs`` (preempted) end without resuming."""
        for seq in list(seqs):
            self.waiting.remove(seq)
