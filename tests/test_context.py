"""Fitting a chat into the target's context: which oldest turns to leave out (hand-built
chats, a token counter that counts words)."""

from specdec_core.context import drop_oldest, messages_to_drop, turn_starts


def chat(*turns, system=None):
    out = [{"role": "system", "content": system}] if system else []
    for i, words in enumerate(turns):
        out.append({"role": "user" if i % 2 == 0 else "assistant", "content": " ".join(["w"] * words)})
    return out


def words(messages):
    return sum(len(m["content"].split()) for m in messages)


def test_drop_oldest_keeps_the_system_message():
    c = chat(3, 4, 5, system="be brief")
    assert drop_oldest(c, 2) == [c[0], c[3]]
    assert drop_oldest(c, 0) == c
    assert turn_starts(c) == [0, 2]


def test_a_chat_that_fits_drops_nothing():
    assert messages_to_drop(chat(10, 10, 10), words, 20, 100) == 0
    assert messages_to_drop(chat(10, 10, 10), words, 20, None) == 0  # unknown context: nothing refused


def test_the_fewest_whole_turns_are_dropped():
    c = chat(10, 20, 10, 20, 10)  # 70 words: user, assistant, user, assistant, user
    # budget 15, context 50: 70+15 no; without the first turn (30 dropped) 40+15 no; without two
    # turns (60 dropped) 10+15 fits -> 4 messages, the kept part starting at a user message
    assert messages_to_drop(c, words, 15, 50) == 4
    assert messages_to_drop(c, words, 15, 60) == 2  # 40 + 15 fits after one turn
    assert words(drop_oldest(c, 2)) + 15 <= 60 < words(c) + 15


def test_when_not_even_the_last_turn_fits_there_is_no_drop_to_offer():
    assert messages_to_drop(chat(10, 20, 40), words, 15, 50) is None
    assert messages_to_drop(chat(60), words, 1, 50) is None  # a single message: nothing to drop
