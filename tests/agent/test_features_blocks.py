"""Relational features: a repeated control belongs to the list item (block) that holds it."""

from __future__ import annotations

from admire.actions import validate_action
from admire.agent.features import BLOCK_FEATURE_NAMES, FEATURE_INDEX, NUM_FEATURES, FeatureBuilder
from admire.embeddings import EmbeddingCache
from admire.types import Observation, Step, UIElement
from tests.support.fakes import TrigramEncoder


def _post(author: str, y: float, reply_active: bool = False) -> list[UIElement]:
    """A social-media post as MiniWoB++ shows it: author, text, then its icon row (named by class)."""
    return [
        UIElement(text=author, class_name="span", bbox=(50, 50 + 8 * len(author), y, y + 10), is_clickable=True),
        UIElement(text="Lorem ipsum.", class_name="div", bbox=(7, 138, y + 13, y + 24), is_clickable=True),
        UIElement(content_description="reply active" if reply_active else "reply", class_name="span",
                  bbox=(18, 32, y + 40, y + 54), is_clickable=True),
        UIElement(content_description="like", class_name="span", bbox=(84, 98, y + 40, y + 54), is_clickable=True),
    ]


def _build(goal: str, elements: list[UIElement], block_features: bool = True):
    builder = FeatureBuilder(EmbeddingCache(TrigramEncoder(dim=384)), block_features=block_features)
    return builder.build(Observation(goal=goal, ui_elements=tuple(elements)), ())


def _row(screen, index: int) -> dict[str, float]:
    (row,) = [r for r, c in enumerate(screen.candidates) if c.kind == "click" and c.element_index == index]
    return {name: float(screen.numeric[row, i]) for name, i in FEATURE_INDEX.items() if i < screen.numeric.shape[1]}


FEED = [*_post("@ann", 0), *_post("@bob", 62), *_post("@ann", 124), *_post("@bob", 186, reply_active=True)]
GOAL = 'Click the "Reply" button on all posts by @bob and then click Submit.'


def test_a_repeated_control_is_tied_to_the_author_above_it():
    screen = _build(GOAL, FEED)
    ann_reply, bob_reply = _row(screen, 2), _row(screen, 6)
    assert (bob_reply["block_named"], bob_reply["twin_block_named"]) == (1.0, 0.0)
    assert (ann_reply["block_named"], ann_reply["twin_block_named"]) == (0.0, 1.0)
    assert bob_reply["pending_this"] == 1.0 and ann_reply["pending_this"] == 0.0
    # The icons of every post (Reply in a Like's block) are the template, not a name that marks a post.
    assert _row(screen, 3)["block_named"] == 0.0


def test_the_name_that_marks_a_block_is_not_itself_pending_and_a_toggled_icon_stays_a_twin():
    screen = _build(GOAL, FEED)
    bob = _row(screen, 4)
    assert bob["names_a_block"] == 1.0 and bob["pending_this"] == 0.0
    assert _row(screen, 14)["block_named"] == 1.0  # "reply active" under the second @bob
    # only the untoggled Reply of @bob's first post is left: every other candidate sees one pending element
    assert _row(screen, 15)["pending_others"] == _row(screen, 2)["pending_others"] > 0.0


def test_a_named_dish_ties_its_plus_button_but_labelled_checkboxes_are_no_twins():
    menu = []
    for k, dish in enumerate(["Caesar Salad", "Chicken wings", "Garlic bread"]):
        y = 40.0 * k
        menu += [UIElement(text=dish, class_name="div", bbox=(2, 91, y, y + 14), is_clickable=True),
                 UIElement(text="-", class_name="span", bbox=(98, 105, y, y + 22), is_clickable=True),
                 UIElement(text="+", class_name="span", bbox=(117, 129, y, y + 22), is_clickable=True)]
    screen = _build("Order one of each item: Chicken wings", menu)
    assert [_row(screen, i)["block_named"] for i in (2, 5, 8)] == [0.0, 1.0, 0.0]
    assert [_row(screen, i)["twin_block_named"] for i in (2, 5, 8)] == [1.0, 0.0, 1.0]

    boxes = [UIElement(class_name="input_checkbox", hint_text=name, bbox=(6, 26, 20 * i, 20 * i + 13),
                       is_clickable=True, is_checkable=True) for i, name in enumerate(["USa", "nLXZO", "qq"])]
    screen = _build("Select nLXZO and click Submit.", boxes)
    assert all(_row(screen, i)["block_named"] == _row(screen, i)["twin_block_named"] == 0.0 for i in range(3))
    assert _row(screen, 1)["pending_this"] == 1.0


def test_a_toggle_renamed_by_its_click_is_still_the_clicked_spot_until_the_screen_scrolls():
    builder = FeatureBuilder(EmbeddingCache(TrigramEncoder(dim=384)), block_features=True)
    before = Observation(goal=GOAL, ui_elements=tuple(FEED))
    toggled = list(FEED)
    toggled[6] = toggled[6].model_copy(update={"content_description": "reply active"})
    after = Observation(goal=GOAL, ui_elements=tuple(toggled))
    click = Step(index=0, observation=before, raw_output="",
                 action=validate_action({"action_type": "click", "index": 6}))
    scroll = Step(index=1, observation=after, raw_output="",
                  action=validate_action({"action_type": "scroll", "direction": "down"}))
    row = _row(builder.build(after, (click,)), 6)
    assert (row["clicked_before"], row["clicked_spot_before"]) == (0.0, 1.0)
    assert _row(builder.build(after, (click, scroll)), 6)["clicked_spot_before"] == 0.0


def test_without_block_features_the_screen_has_the_old_columns_and_the_old_pending_work():
    """Off (the default), nothing changes for the policies measured before the features existed."""
    off, on = _build(GOAL, FEED, block_features=False), _build(GOAL, FEED)
    assert off.numeric.shape[1] == NUM_FEATURES and on.numeric.shape[1] == NUM_FEATURES + len(BLOCK_FEATURE_NAMES)
    ann_reply = _row(off, 2)
    assert ann_reply["pending_this"] == 1.0  # every Reply is pending work when nothing ties it to a post
    assert (on.numeric[:, :NUM_FEATURES] != off.numeric).any()  # ...which the block features change


def test_a_dom_policy_with_block_features_scores_and_refuses_a_checkpoint_of_the_other_shape():
    import pytest

    from admire.agent.dom_policy import DomPolicy

    encoder = TrigramEncoder(dim=384)
    with_blocks = DomPolicy(encoder=encoder, embedding_dim=384, block_features=True)
    plain = DomPolicy(encoder=encoder, embedding_dim=384)
    screen = with_blocks.features.build(Observation(goal=GOAL, ui_elements=tuple(FEED)), ())
    assert with_blocks.candidate_log_probs([screen]).shape == (1, len(screen.candidates))
    with pytest.raises((RuntimeError, ValueError)):
        plain.load_state_dict(with_blocks.state_dict())
