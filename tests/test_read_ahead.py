"""Between a chat's turns the draft reads what its windows skipped (Engine.read_ahead): the view
is made whole, the next turn reads only its new message, the output stays standard greedy's,
and a read stops for new work within one of its passes."""

import threading
import time

import pytest
import torch

from specdec_core.decoder import Decoder
from specdec_core.lm import CachedLM
from specdec_core.proposers import DraftModelProposer
from specdec_core.serve.queue import DecodeQueue, QueuedEngine
from specdec_core.settings import DecodeSettings
from test_decoder import PROMPTS, _Scripted


def _gappy_turn(tiny, monkeypatch, prompt):
    """A turn whose plain stretches the draft skips (a window of 2): its view has gaps."""
    import specdec_core.decoder as decoder_module

    monkeypatch.setattr(decoder_module, "make_policy", lambda *a: _Scripted([3] + [0] * 7 + [4] + [0] * 5))
    dec = Decoder(tiny.target, tiny.tokenizer)
    prop = DraftModelProposer(tiny.draft, tiny.vocab)
    prop.catchup_window = 2
    out = dec.generate(prompt, DecodeSettings(max_new_tokens=30, draft_tokens=3), prop).run()
    assert prop.gaps  # it did skip
    return dec, prop, list(prompt) + out.token_ids


@pytest.mark.parametrize("prompt", PROMPTS[:2])
def test_a_backlog_read_makes_the_view_what_a_whole_read_gives(tiny, monkeypatch, prompt):
    dec, prop, seq = _gappy_turn(tiny, monkeypatch, prompt)
    first_gap = prop.gaps[0][0]
    read, seconds = prop.read_backlog(chunk=5)
    # rolled back to the first gap and read on to the last token (fed with the next proposal)
    assert read == len(seq) - 1 - first_gap and seconds > 0
    assert prop.gaps == [] and prop.offset == 0 and prop.lm.ids == seq[:-1]
    # its cache gives what one read of the whole sequence gives
    whole = CachedLM(tiny.draft, vocab_size=tiny.vocab)
    whole.forward(seq[:-1], logits_to_keep=0)
    torch.testing.assert_close(prop.lm.forward(seq[-1:])[-1], whole.forward(seq[-1:])[-1], rtol=1e-4, atol=1e-4)
    prop.lm.rollback(len(seq) - 1)
    assert prop.read_backlog() == (0, 0.0)  # nothing left


def test_a_backlog_read_stops_when_asked_and_leaves_a_whole_view(tiny, monkeypatch):
    dec, prop, seq = _gappy_turn(tiny, monkeypatch, PROMPTS[0])
    first_gap = prop.gaps[0][0]
    asked = []
    read, _ = prop.read_backlog(stop=lambda: asked.append(1) or len(asked) > 2, chunk=3)
    assert read == 6 and prop.gaps == [] and prop.lm.ids == seq[: first_gap + 6]  # two passes, then stopped
    assert prop.seen == first_gap + 6 and prop.unread(seq) == min(len(seq) - 1 - prop.seen, prop.catchup_window)


def test_the_next_turn_after_a_read_reads_only_its_message_and_says_the_same(tiny, monkeypatch):
    turn2, outs = None, {}
    for read in (False, True):
        dec, prop, seq = _gappy_turn(tiny, monkeypatch, PROMPTS[0])
        if read:
            prop.read_backlog()
        turn2 = seq + [3, 4, 5, 6, 7]
        # the same plan as before the read: every step after the first plain
        dec_turn = dec.generate(turn2, DecodeSettings(max_new_tokens=12, draft_tokens=3), prop, reuse_cache=True)
        outs[read] = dec_turn.run()
    std = Decoder(tiny.target, tiny.tokenizer).generate(turn2, DecodeSettings(max_new_tokens=12)).run()
    assert outs[True].token_ids == outs[False].token_ids == std.token_ids
    # the first proposal reads the new message (and the token before it, never fed), no more;
    # without the read the window of 128 takes in the stretches the first turn skipped too
    assert outs[True].stats.catchup_tokens < outs[False].stats.catchup_tokens


def _engine(first_read_window=None):
    from app_fixtures import tiny_factory

    engine = tiny_factory(report=False)(lambda *_a: None)
    if first_read_window is not None:
        engine.proposer("lookup+draft").draft.first_read_window = first_read_window
    return engine


def test_the_engine_reads_for_its_last_speculative_proposer_and_the_next_turn_says_so():
    engine = _engine(first_read_window=2)
    chat = [{"role": "user", "content": "is the cat on the mat or in the hat"}]
    ids = engine.encode_chat(chat)
    settings = DecodeSettings(8, draft_tokens=2)
    engine.generate(ids, DecodeSettings(8, mode="standard")).run()
    assert engine.read_ahead() == (0, 0.0)  # after a standard answer: no draft to bring along
    first = engine.generate(ids, settings, reuse_cache=True).run()
    read, seconds = engine.read_ahead()
    assert read > 0 and seconds > 0  # the prompt's start, which its first read's window skipped
    turn2 = engine.encode_chat(chat + [{"role": "assistant", "content": first.text},
                                       {"role": "user", "content": "the hat"}])
    second = engine.generate(turn2, settings, reuse_cache=True).run()
    assert (second.stats.idle_read_tokens, second.stats.idle_read_seconds) == (read, seconds)
    again = engine.generate(turn2, settings, reuse_cache=True).run()
    assert again.stats.idle_read_tokens == 0  # each read is told once, to the turn after it
    fresh = _engine().generate(turn2, DecodeSettings(8, mode="standard")).run()
    assert second.token_ids == again.token_ids == fresh.token_ids


def test_a_read_that_ends_after_a_generation_is_made_is_told_to_that_generation():
    """A server makes a request's generation before its turn (QueuedEngine.generate), while the
    read between requests may still be going: the read's figures belong to that generation, taken
    when it starts, and not to the one after it."""
    engine = _engine(first_read_window=2)
    chat = [{"role": "user", "content": "is the cat on the mat or in the hat"}]
    settings = DecodeSettings(8, draft_tokens=2)
    first = engine.generate(engine.encode_chat(chat), settings, reuse_cache=True).run()
    turn2 = engine.encode_chat(chat + [{"role": "assistant", "content": first.text},
                                       {"role": "user", "content": "the hat"}])
    second = engine.generate(turn2, settings, reuse_cache=True)  # made while the read goes on ...
    read, seconds = engine.read_ahead()  # ... which ends before its turn
    assert read > 0
    second.run()
    assert (second.stats.idle_read_tokens, second.stats.idle_read_seconds) == (read, seconds)
    assert engine.generate(turn2, settings, reuse_cache=True).run().stats.idle_read_tokens == 0


def test_a_queued_engine_reads_only_while_the_line_is_empty_and_stops_when_someone_joins():
    queue = DecodeQueue(4)
    calls = []

    class Inner:
        def read_ahead(self, stop):
            calls.append("read")
            while not stop():
                time.sleep(0.005)
            return 3, 0.5

    engine = QueuedEngine(Inner(), queue)
    held = queue.join()
    assert queue.wait(held)  # someone decodes: no read
    assert engine.read_ahead() == (0, 0.0) and calls == []
    queue.release()
    waiting = queue.join()  # someone waits: no read either
    assert engine.read_ahead() == (0, 0.0) and calls == []
    queue.leave(waiting)
    got = []
    reader = threading.Thread(target=lambda: got.append(engine.read_ahead()))
    reader.start()
    deadline = time.monotonic() + 10
    while not calls and time.monotonic() < deadline:
        time.sleep(0.005)
    assert queue.busy  # the read holds the turn ...
    ticket = queue.join()  # ... until a request joins the line
    assert queue.wait(ticket)
    reader.join(10)
    assert got == [(3, 0.5)]
    queue.release()
    assert queue.turns == 2  # the two requests: the read is not a served turn


def test_a_queued_engine_reads_an_input_ahead_only_in_a_turn_of_its_own():
    """QueuedEngine.read_prompt (the app's chat while it serves its models), as read_ahead: no turn
    while someone holds or waits for one; a request that joins stops it."""
    queue = DecodeQueue(4)
    asked = []

    class Inner:
        def read_prompt(self, prompt, stop):
            asked.append(list(prompt))
            while not stop():
                time.sleep(0.005)
            return len(prompt), 0.5

    engine = QueuedEngine(Inner(), queue)
    held = queue.join()
    assert queue.wait(held) and engine.read_prompt([1, 2, 3]) == (0, 0.0) and asked == []
    queue.release()
    assert engine.read_prompt("a server's text prompt") == (0, 0.0) and asked == []  # ids only
    got = []
    reader = threading.Thread(target=lambda: got.append(engine.read_prompt([1, 2, 3])))
    reader.start()
    deadline = time.monotonic() + 10
    while not asked and time.monotonic() < deadline:
        time.sleep(0.005)
    ticket = queue.join()
    assert queue.wait(ticket)
    reader.join(10)
    assert got == [(3, 0.5)] and asked == [[1, 2, 3]]
    queue.release()


def test_a_server_s_engine_reads_after_a_speculative_answer_and_not_after_a_standard_one():
    engine = _engine(first_read_window=2)
    queue = DecodeQueue(4)
    queued = QueuedEngine(engine, queue, read_between=True)
    ids = engine.encode_chat([{"role": "user", "content": "is the cat on the mat or in the hat"}])
    reads = []
    real = engine.read_ahead
    engine.read_ahead = lambda stop=lambda: False: reads.append(real(stop)) or reads[-1]
    queued.generate(ids, DecodeSettings(6, mode="standard")).run()
    queued.generate(ids, DecodeSettings(6, draft_tokens=2)).run()
    deadline = time.monotonic() + 10
    while not reads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(reads) == 1 and reads[0][0] > 0


# -- the target reads the prompt the input box would send (Engine.read_prompt) -------------------
LONG = "the cat sat on the mat and the dog was in the hat " * 14  # ~170 tokens: two passes of 128


def _chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_the_target_reads_a_long_input_ahead_and_the_send_keeps_it():
    from specdec_core.engine import PROMPT_READ_ROWS

    engine = _engine()
    writing = engine.encode_chat(_chat(LONG + "what"))  # the input box, the question half typed
    read, seconds = engine.read_prompt(writing)
    assert read == len(writing) - 1 > PROMPT_READ_ROWS and seconds > 0  # all but the last token, in two passes
    assert engine.decoder.target.ids == writing[:-1]
    draft = engine.proposer("lookup+draft").draft  # the draft then read it too, whole
    assert draft.lm.length == len(writing) - 1 and not draft.gaps
    sent = engine.encode_chat(_chat(LONG + "what is on the mat"))  # the send: the question went on
    kept = len(common_prefix(writing, sent))
    gen = engine.generate(sent, DecodeSettings(6, draft_tokens=2), reuse_cache=True).run()
    assert gen.stats.reused_prompt_tokens == gen.stats.prompt_read_ahead_tokens == kept
    assert gen.stats.prompt_read_ahead_seconds == seconds
    assert gen.stats.idle_read_tokens == len(writing) - 1 and gen.stats.idle_read_seconds > 0  # from an empty cache
    assert gen.stats.catchup_tokens <= len(sent) - kept  # the draft's read at the send: what the question added
    again = engine.generate(sent, DecodeSettings(6, draft_tokens=2), reuse_cache=True).run()
    assert again.stats.prompt_read_ahead_tokens == 0  # each read is told once
    # a generation that does not keep the cache says nothing of a read before it
    engine.read_prompt(engine.encode_chat(_chat(LONG + "and then")))
    assert engine.generate(sent, DecodeSettings(4, mode="standard")).run().stats.prompt_read_ahead_tokens == 0


def test_a_short_input_is_left_to_the_send_and_a_stop_ends_the_read_between_passes():
    from specdec_core.engine import PROMPT_READ_MIN, PROMPT_READ_ROWS

    engine = _engine()
    engine.generate(engine.encode_chat(_chat("the cat")), DecodeSettings(4, mode="standard"), reuse_cache=True).run()
    cached = list(engine.decoder.target.ids)
    short = engine.encode_chat(_chat("the cat sat on the mat"))
    assert len(short) - 1 - len(common_prefix(cached, short)) < PROMPT_READ_MIN
    draft = engine.proposer("lookup+draft").draft
    seen = (list(draft.seq), draft.lm.length, list(draft.gaps))
    assert engine.read_prompt(short) == (0, 0.0) and engine.decoder.target.ids == cached  # nothing moved
    assert (draft.seq, draft.lm.length, draft.gaps) == seen and engine._idle_read == (0, 0.0)
    asked = []
    stop = lambda: (asked.append(1), len(asked) > 2)[1]  # noqa: E731 -- asked before each pass: one goes
    long = engine.encode_chat(_chat(LONG))
    read, _ = engine.read_prompt(long, stop)
    assert read == PROMPT_READ_ROWS and engine.decoder.target.length == len(common_prefix(cached, long)) + read
    # the next read goes on from there; the send is told both, as one read
    rest, _ = engine.read_prompt(long)
    gen = engine.generate(long, DecodeSettings(3, mode="standard"), reuse_cache=True).run()
    assert gen.stats.prompt_read_ahead_tokens == read + rest == len(long) - 1 - len(common_prefix(cached, long))


def test_a_read_input_changed_before_the_send_counts_only_what_the_send_kept():
    engine = _engine()
    first = engine.encode_chat(_chat(LONG + "is the cat on the mat"))
    engine.read_prompt(first)
    edited = engine.encode_chat(_chat("a dog " + LONG))  # changed at the start: nothing read is kept
    kept = len(common_prefix(first, edited))
    gen = engine.generate(edited, DecodeSettings(3, mode="standard"), reuse_cache=True).run()
    assert 0 < kept < 10 and gen.stats.reused_prompt_tokens == kept  # the chat template's opening
    assert gen.stats.prompt_read_ahead_tokens == kept  # of the read, what the send kept


def common_prefix(a: list[int], b: list[int]) -> list[int]:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]
