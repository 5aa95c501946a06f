"""Spans of the goal: what the dom policy may type, taken from the instruction and nothing else."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from admire.agent.spans import STOP_WORDS, goal_spans, goal_words

LOGIN_GOAL = 'Enter the username "karrie" and the password "X1z" into the text fields and press login.'


def texts(goal: str, max_spans: int = 8) -> list[str]:
    return [span.text for span in goal_spans(goal, max_spans)]


def quoted(goal: str) -> list[str]:
    return [span.text for span in goal_spans(goal, 64) if span.quoted]


def test_quoted_strings_come_first_in_order_of_appearance():
    assert texts(LOGIN_GOAL)[:2] == ["karrie", "X1z"]
    spans = goal_spans(LOGIN_GOAL)
    assert [s.quoted for s in spans[:2]] == [True, True]
    assert not any(s.quoted for s in spans[2:])


def test_context_is_the_words_before_the_span():
    karrie, password = goal_spans(LOGIN_GOAL)[:2]
    assert karrie.context == "Enter the username"
    assert password.context == "and the password"


def test_context_stops_at_a_sentence_break():
    (span,) = [s for s in goal_spans('Go home. Type "abc" now.') if s.text == "abc"]
    assert span.context == "Type"


def test_names_and_codes_rank_before_plain_words():
    goal = "Find the email by Ilka and forward that email to Lenka."
    assert texts(goal)[:2] == ["Ilka", "Lenka"]
    assert texts("Select nLXZO, 6Y6, and click Submit.")[:3] == ["nLXZO", "6Y6", "Submit"]


def test_multi_word_names_are_offered_before_their_first_word():
    spans = texts("Book a flight from New York to San Francisco.")
    assert spans.index("New York") < spans.index("New")
    assert "San Francisco" in spans


def test_stop_words_and_punctuation_are_never_spans():
    spans = texts("Click on the button and then go to the next page, please!", max_spans=30)
    assert spans, "content words should remain"
    assert not {s.lower() for s in spans} & STOP_WORDS
    assert all(any(ch.isalnum() for ch in s) for s in spans)


def test_quoted_text_is_kept_verbatim_including_punctuation():
    goal = 'Find the email by Darya and reply to them with the text "Proin.".'
    assert texts(goal)[0] == "Proin."
    assert quoted(goal) == ["Proin."]


def test_apostrophes_inside_words_are_not_quotes():
    goal = "It's Anna's turn: type 'hello' please"
    assert quoted(goal) == ["hello"]


def test_duplicates_are_dropped_and_the_cap_is_respected():
    goal = 'Type "Bob" then "Bob" again, Bob'
    assert texts(goal).count("Bob") == 1
    assert len(goal_spans(LOGIN_GOAL, max_spans=3)) == 3
    assert goal_spans(LOGIN_GOAL, max_spans=0) == ()


def test_goal_words_are_lower_cased_without_edge_punctuation():
    assert {"login", "karrie", "username"} <= goal_words(LOGIN_GOAL)


@pytest.mark.parametrize("goal", ["", "   ", "the of and", '""'])
def test_goals_without_content_give_no_spans(goal):
    assert goal_spans(goal) == ()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120), st.integers(min_value=0, max_value=12))
def test_every_span_is_a_piece_of_the_goal_and_the_list_is_deterministic(goal, cap):
    spans = goal_spans(goal, cap)
    assert len(spans) <= cap
    assert len({s.text for s in spans}) == len(spans)
    for span in spans:
        assert span.text and span.text in goal
        assert goal[span.start:span.start + len(span.text)] == span.text
    assert goal_spans(goal, cap) == spans


def test_offsets_point_at_the_span_even_after_leading_punctuation():
    goal = "Pick .Alpha, 'Beta Gamma' and ...Delta Echo."
    for span in goal_spans(goal, 20):
        assert goal[span.start:span.start + len(span.text)] == span.text
