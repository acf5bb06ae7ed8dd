"""Tier 1: each token's kind from llama-server's running draft counters, on hand-built chunk
sequences (steps.py). The sequences follow how the server counts: a step's draft is counted
before it is verified, and its kept drafts and the target's token are sent after both
counters moved; a plain step moves neither."""

from specdec_core.events import TokenKind
from specdec_core.remote.steps import StepRebuilder

A, B, C, S, P = "accepted", "bonus", "corrected", "standard", "server"


def run(chunks):
    """chunks: [(tokens_predicted, (draft_n, accepted) | None)] -> (kinds, rebuilder)."""
    rb = StepRebuilder()
    kinds = []
    for n, counters in chunks:
        kinds += [o.kind.value for o in rb.feed(n, counters)]
    return kinds, rb


def test_the_issue_example_code_answer():
    # the issue's code answer: 3/3 three times after the first token, then 6/6, ...
    chunks = [(1, (0, 0)), (2, (3, 3)), (3, (3, 3)), (4, (3, 3)), (5, (3, 3)),
              (6, (6, 6)), (7, (6, 6)), (8, (6, 6)), (9, (6, 6)),
              (10, (9, 7)), (11, (9, 7)), (12, (9, 7))]
    kinds, rb = run(chunks)
    # 9/7 kept one of three: accepted, corrected; the token after it moved nothing: plain
    assert kinds == [S, A, A, A, B, A, A, A, B, A, C, S]
    assert rb.spec_steps == [(3, 3), (3, 3), (3, 1)]
    assert rb.plain_steps == 2 and rb.verifications == 5 and rb.steps_known
    assert rb.per_position() == ([3, 3, 3], [3, 2, 2])


def test_a_rejected_first_draft_is_one_corrected_token():
    kinds, rb = run([(1, (0, 0)), (2, (3, 0)), (3, (6, 0))])
    assert kinds == [S, C, C]
    assert rb.spec_steps == [(3, 0), (3, 0)]


def test_unchanged_counters_after_a_step_are_plain_steps():
    # a step ends; then two steps whose draft came back empty; then a new step
    kinds, rb = run([(1, (0, 0)), (2, (2, 1)), (3, (2, 1)), (4, (2, 1)), (5, (2, 1)), (6, (4, 3)),
                     (7, (4, 3)), (8, (4, 3))])
    assert kinds == [S, A, C, S, S, A, A, B]
    assert rb.plain_steps == 3 and rb.verifications == 5


def test_a_server_without_a_draft_is_all_standard():
    kinds, rb = run([(i, (0, 0)) for i in range(1, 6)])
    assert kinds == [S] * 5 and rb.spec_steps == []


def test_a_held_back_token_inside_a_step_keeps_its_colour():
    # the second token of a step ends inside a UTF-8 character: no chunk for it; its count
    # comes with the next chunk, which is still inside the same step
    kinds, rb = run([(1, (0, 0)), (2, (3, 3)), (4, (3, 3)), (5, (3, 3)), (6, (5, 4))])
    assert kinds == [S, A, A, A, B, A]
    assert rb.steps_known


def test_a_held_back_step_start_is_not_coloured_until_the_next_visible_step():
    # token 2 (held back) may be a plain step or the start of the step that moved the
    # counters: unknown, so tokens 2-4 are `server`, and from token 5 on a step starts in sight
    kinds, rb = run([(1, (0, 0)), (3, (3, 3)), (4, (3, 3)), (5, (6, 5)), (6, (6, 5))])
    assert kinds == [S, P, P, P, A, A]
    assert not rb.steps_known and rb.unknown_tokens == 3 and "held back" in rb.mismatch
    assert rb.spec_steps == [(3, 2)]


def test_counters_no_step_can_explain_withhold_colours():
    kinds, rb = run([(1, (0, 0)), (2, (2, 3)), (3, (2, 3)), (4, (5, 4)), (5, (5, 4))])
    assert kinds == [S, P, P, A, C]
    assert "no step can do" in rb.mismatch


def test_a_step_shorter_than_its_counters_is_noticed():
    # 3/3 promises four tokens; the counters move again after two: the earlier guess stands
    # (already shown) but the mismatch is reported and the new step is coloured from its own
    kinds, rb = run([(1, (0, 0)), (2, (3, 3)), (3, (3, 3)), (4, (6, 4))])
    assert kinds == [S, A, A, A]  # the new step (3 proposed, 1 kept) starts with its accepted token
    assert "ended" in rb.mismatch


def test_chunks_without_timings_are_server_tokens():
    kinds, rb = run([(1, None), (2, None)])
    assert kinds == [P, P]
    # once counters come back, a step that starts in sight is coloured again
    kinds, rb = run([(1, None), (2, (0, 0)), (3, (2, 2)), (4, (2, 2)), (5, (2, 2))])
    assert kinds == [P, P, A, A, B]


def test_a_repeated_or_final_chunk_adds_nothing():
    rb = StepRebuilder()
    assert [o.kind for o in rb.feed(1, (0, 0))] == [TokenKind.STANDARD]
    assert rb.feed(1, (0, 0)) == []  # the final `stop` chunk repeats the last count


def test_origins_carry_step_position_and_draft_length():
    rb = StepRebuilder()
    rb.feed(1, (0, 0))
    o = rb.feed(2, (4, 2)) + rb.feed(3, (4, 2)) + rb.feed(4, (4, 2))
    assert [(x.step, x.draft_position, x.draft_length) for x in o] == [(1, 0, 4), (1, 1, 4), (1, 2, 4)]
    assert o[-1].kind == TokenKind.CORRECTED
