"""A small draft model that proposes k tokens autoregressively with its own KV cache."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from ..lm import CachedLM, common_prefix
from ..sampling import SamplingParams, greedy_picks, probabilities, sample_from, shaped_logits, top_probability
from .base import DRAFT, DraftPlan, Proposal


# The rows of one pass of a backlog read (read_backlog): ~60 ms of the embedded draft on the
# Intel VM's amx build, ~0.1 s on AVX2 -- how long a new message waits for a read it stops.
BACKLOG_CHUNK = 32
# The rows of one pass of a message read before its send (read_prompt): ~0.12 s here, the wait of
# a send that stops it; a document of 1,500 tokens is ~25 of them.
PROMPT_CHUNK = 64


class DraftModelProposer:
    name = "draft"
    sources = (DRAFT,)
    # After steps it did not propose (plain steps, prompt lookup's) the draft reads only the
    # last this-many tokens of what they wrote: reading a backlog costs ~0.1 of a target step
    # a token on the project's CPU, so a probe after 32 plain steps paid ~11% of their time for
    # text the next few proposals hardly need. What it skips is a gap in the draft's view
    # only: the target verifies whatever the draft proposes from its own distribution, so
    # exactness does not depend on what the draft has read.
    catchup_window = 16
    # Its first read of a sequence past what it kept (a prompt, a chat turn's new message and
    # the part of the last answer it did not read) takes at most this many of the latest
    # tokens: a read costs ~5 ms a token here (the draft's multi-row pass), so a 600-token
    # conversation read whole cost ~60 plain steps, more than a 256-token answer can win back,
    # and the controller never started the draft after the first turns (issue 28). The
    # question and the text just before it are what the next tokens depend on most.
    first_read_window = 128

    def __init__(self, model: torch.nn.Module, target_vocab_size: int, lean=None,
                 clock: Callable[[], float] = time.perf_counter):
        """clock: what its catch-up reads are timed on -- the decoder's own (Decoder's `clock`),
        since the controller takes the read out of the step's drafting time."""
        self.clock = clock
        # q_draft must live on the target's ids: trim/pad the draft's head to that width
        # *before* warping, so what we sample from is exactly the q we report.
        self.lm = CachedLM(model, vocab_size=target_vocab_size, lean=lean)
        # The draft's view is the committed sequence with gaps where it skipped text: `seq` is
        # the committed sequence it read from, `gaps` the (position in seq, tokens skipped
        # there) of each gap, in order. seq[i] sits at cache position i - (tokens skipped
        # before i), so the cache stands for seq[: lm.length + offset].
        self.seq: list[int] = []
        self.gaps: list[tuple[int, int]] = []
        # seconds of a pass that feeds one token (EMA over proposals): what a proposing pass that
        # also reads a backlog would have cost without it, so that its catch-up is told apart
        self.one_row_seconds: float | None = None
        self.fresh = True  # nothing of this sequence read yet past what a reset kept

    @property
    def offset(self) -> int:
        """Tokens of the committed sequence the draft skipped (its view's gaps, in all)."""
        return sum(n for _, n in self.gaps)

    @property
    def seen(self) -> int:
        """How much of the committed sequence the view covers: read, or skipped in a gap."""
        return self.lm.length + self.offset

    def reset(self, keep: list[int] | None = None) -> None:
        """`keep`: the new sequence; the view keeps the longest prefix of it that it read (a
        chat's next turn, a regenerated answer, an edited message: their common prefix with
        what came before), gaps included."""
        self.fresh = True
        if keep is None or self.lm.cache is None:
            self.lm.reset()
            self.seq, self.gaps = [], []
            return
        # the last token of keep is fed with the first proposal
        n = common_prefix(self.seq, keep, min(self.seen, len(keep) - 1))
        # seq[:n] is shared: the view keeps what it read of it, and the gaps before n (one that
        # n cuts ends at n: the next read goes on from there)
        cache, kept_gaps = n, []
        for at, skipped in self.gaps:
            if at >= n:
                break
            kept_gaps.append((at, min(skipped, n - at)))
            cache -= kept_gaps[-1][1]
        if cache <= 0:
            self.lm.reset()
            self.seq, self.gaps = [], []
            return
        self.lm.rollback(cache)
        self.seq, self.gaps = keep, kept_gaps

    def prime(self, ids: list[int]) -> None:
        """Read `ids` into a cache that holds nothing: what a session reads once so that its
        first chat, like every later one, finds the chat template's head cached
        (Engine.read_template_head). The sequences that follow go on past `ids`."""
        self.reset()
        if ids:
            self.lm.forward(list(ids), logits_to_keep=0)
            self.seq = list(ids)

    def read_backlog(self, stop: Callable[[], bool] = lambda: False, chunk: int = BACKLOG_CHUNK) -> tuple[int, float]:
        """Read, while nothing else runs (between a chat's turns), what the view skipped or has
        not reached of the sequence it last saw: -> (tokens read, seconds). The windows above
        keep a read out of an answer's time by leaving gaps; here the time is the user's, so the
        view is made whole -- rolled back to its first gap and read on to the sequence's end in
        multi-row passes of `chunk` tokens -- and the next turn's first read is its new message
        only. `stop` is asked before each pass: once it is true the read ends there, and the
        view is whole up to where it got (the next proposal reads on from there, windowed)."""
        if self.lm.cache is None or not self.seq:
            return 0, 0.0
        if self.gaps:  # no gap before the first one: seq[at] sits at cache position at
            self.lm.rollback(self.gaps[0][0])
            self.gaps = []
        # the sequence's last token is fed with the next proposal, as after any step
        end, read, t = len(self.seq) - 1, 0, self.clock()
        while self.lm.length < end and not stop():
            at = self.lm.length
            n = min(chunk, end - at)
            self.lm.forward(self.seq[at: at + n], logits_to_keep=0)
            read += n
        return read, (self.clock() - t) if read else 0.0

    def read_prompt(self, ids: list[int], stop: Callable[[], bool] = lambda: False, least: int = 1,
                    chunk: int = PROMPT_CHUNK) -> tuple[int, float]:
        """Before a message is sent (Engine.read_prompt): the view takes in `ids`, the prompt the
        input box would make, whole -- keeping what it read of it, reading the rest but its last
        token in passes of `chunk` rows, `stop` asked before each -- so the send's first read is
        what the question added, and the draft proposes knowing the document above it. Nothing
        when fewer than `least` tokens are new. -> (tokens read, seconds)."""
        whole = self.gaps[0][0] if self.gaps else self.lm.length  # what it read without a gap
        known = common_prefix(self.seq, ids, min(whole, len(ids) - 1)) if self.lm.cache is not None else 0
        if len(ids) - 1 - known < least or stop():
            return 0, 0.0
        self.reset(keep=ids)
        self.seq = list(ids)
        return self.read_backlog(stop, chunk)

    def _window(self) -> int:
        return self.first_read_window if self.fresh else self.catchup_window

    def unread(self, ids: list[int]) -> int:
        pending = len(ids) - self.seen
        if pending <= 2:  # what a speculative step leaves: read with the first drafted token
            return 0
        return min(pending - 1, self._window())

    def propose(self, ids: list[int], plan: DraftPlan, params: SamplingParams, rng: torch.Generator,
                constraint=None) -> Proposal:
        """`constraint`: each row is masked at the grammar's state after the tokens drafted so
        far, as the target's rows are (q_draft is then the masked distribution it sampled)."""
        k, min_confidence = plan.draft, plan.min_confidence
        if k <= 0:
            return Proposal([])
        tokens: list[int] = []
        q_rows: list[torch.Tensor] = []
        start = self.lm.forward_passes
        # Feed whatever the cache lacks: the target's last token (and, after an all-accepted
        # step, the last draft token the draft never fed) -- or a backlog: the prompt on a
        # late start, the text of steps the draft did not propose. A backlog rides in the first
        # proposing pass: a pass of its own would read every weight once more for it (~0.25 of
        # a target step on the embedded pair; speed notes, item 117). Its time is that pass's
        # less what a one-token pass takes (measured here); until one was measured it is read
        # in a pass of its own, which measures it exactly.
        seen = self.seen
        pending = ids[seen:]
        self.seq = ids
        catchup, read = 0.0, 0
        if len(pending) > 2:
            skip = max(len(pending) - 1 - self._window(), 0)
            if skip:
                self.gaps.append((seen, skip))
                pending = pending[skip:]
            read = len(pending) - 1
            if self.one_row_seconds is None:
                t = self.clock()
                self.lm.forward(pending[:-1], logits_to_keep=0)
                catchup, pending = self.clock() - t, pending[-1:]
        self.fresh = False
        sure = 1.0  # the draft's own probability that every token so far is right
        expected = 0.0  # the sum of those: the number of these tokens it expects kept
        for _ in range(k):
            t = self.clock()
            logits = self.lm.forward(pending, logits_to_keep=1)[-1]  # [V]
            took = self.clock() - t
            if len(pending) == 1:
                self.one_row_seconds = took if self.one_row_seconds is None else 0.7 * self.one_row_seconds + 0.3 * took
            elif len(pending) > 2:  # the backlog read with this pass (one_row_seconds is known)
                catchup = max(took - self.one_row_seconds, 0.0)
            if constraint is not None:
                logits = constraint.mask(logits[None], tokens, first=len(tokens))[0]
                if not bool(torch.isfinite(logits).any()):
                    # the draft cannot spell any token the grammar allows here (a reduced head,
                    # models/draft_vocab.py, lacks them): it has no distribution to sample, so it
                    # stops, and the target decides this position alone
                    break
            # the bias and penalties as the target's row at this position has them
            seen = ids + tokens if params.shapes_logits else None
            if params.greedy:
                logits = logits if seen is None else shaped_logits(logits[None], params, seen)[0]
                # its pick, and its own probability of it (softmax at T=1) -- only if asked
                tok, conf = top_probability(logits) if min_confidence > 0 else (greedy_picks(logits[None])[0][0], 1.0)
            else:
                q = probabilities(logits[None], params, seen)[0]  # [V]
                u = float(torch.rand((), generator=rng))
                tok = sample_from(q, u)
                q_rows.append(q)
                conf = float(q[tok])
            tokens.append(tok)
            pending = [tok]
            # Once the draft doubts the run so far will all be accepted, another token is
            # more likely wasted than kept: stop and let the target verify now. The stop
            # depends on the draft's values only, so the acceptance rule stays exact.
            sure *= conf
            expected += sure
            if sure < plan.confidence_after(len(tokens)):
                break
        # The last proposed token is not fed: k passes give k tokens. observe() rolls back.
        q_draft = torch.stack(q_rows) if q_rows else None
        return Proposal(tokens, q_draft, self.lm.forward_passes - start, catchup_seconds=catchup,
                        catchup_tokens=read, source=DRAFT,
                        expected_accepted=expected if min_confidence > 0 or not params.greedy else None)

    def observe(self, ids: list[int], n_accepted: int) -> None:
        # Keep the committed prefix the cache already holds; everything after the last
        # accepted draft token (rejected drafts) goes. The new last token is fed next time.
        self.seq = ids
        self.lm.rollback(min(self.lm.length, len(ids) - 1 - self.offset))
