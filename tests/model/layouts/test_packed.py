"""The packed layout: the hashed tables with 4-byte entries (16 stored key bits, 16-bit
value codes), for any model; checked against the float model and the brute-force
perplexity, through batch scoring, distributions, states and the CLI."""

import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.models import brute_force_perplexity

from snm.cli import main
from snm_core.io.errors import SnmInputError
from snm_core.model.compact import compile_model, load_model
from snm_core.model.layouts import hashed
from snm_core.text.tokenize import tokenize

#: A packed value is within half a code step of the float: 2^(1/1024) - 1.
VALUE_ERROR = 2 ** (1 / 1024) - 1


@pytest.fixture(scope="module", params=["ngram", "skip"])
def pair(request, ngram_model, tagged_skip_model, tmp_path_factory):
    """``(hashed dir, packed dir, test lines)`` of the session's 5-gram and tagged
    skip-gram models."""
    source, test = ngram_model if request.param == "ngram" else tagged_skip_model
    packed = tmp_path_factory.mktemp("packed") / "model"
    shutil.copytree(source, packed)
    compile_model(str(packed), "packed")
    return source, packed, test


def probabilities(model, lines):
    batch, _, _ = tokenize(lines, model.vocab)
    return model.score_batch(batch, unadjusted=False).prob


@settings(max_examples=200, deadline=None)
@given(st.floats(2.0 ** -60, 2.0 ** 60))
def test_value_codes_round_trip_within_half_a_step(value):
    decoded = float(hashed.CODEBOOK[hashed.value_codes([value])[0]])
    assert abs(decoded / value - 1) <= VALUE_ERROR


def test_codes_keep_zero_and_the_shared_marker():
    codes = hashed.value_codes([0.0, hashed.SHARED, 1.0])
    assert hashed.CODEBOOK[codes].tolist() == [0.0, -1.0, 1.0]


def test_packed_model_is_the_float_model_within_its_rounding(pair):
    """Each event's probability is a ratio of sums of values each within half a step,
    so within about twice that of the float model's; the perplexity is the brute-force
    one's to the same bound; the arrays are half the hashed layout's or less."""
    source, packed, test = pair
    float_model, packed_model = load_model(str(source)), load_model(str(packed))
    assert packed_model.features.packed and packed_model.links.packed
    ratio = probabilities(packed_model, test) / probabilities(float_model, test)
    assert np.all(np.abs(ratio - 1) <= 2.5 * VALUE_ERROR)
    assert not np.all(ratio == 1)  # values were rounded
    ppl = packed_model.evaluate_lines(test)
    assert list(ppl) == ["adjusted"]
    assert ppl["adjusted"]["perplexity"] == pytest.approx(
        brute_force_perplexity(source, test, adjusted=True), rel=2.5 * VALUE_ERROR)
    sizes = {d: sum(f.stat().st_size for f in (d / "compact").glob("*.npy"))
             for d in (source, packed)}
    assert sizes[packed] < 0.55 * sizes[source]


def test_packed_distributions_states_and_scores_agree(pair):
    source, packed, test = pair
    model = load_model(str(packed))
    words = test[1].split()
    # M_f* and each M_fw are rounded apart: a distribution sums to 1 within their error.
    assert model.distribution(words[:3]).sum() == pytest.approx(1.0, rel=2.5 * VALUE_ERROR)
    probs = probabilities(model, [test[1]])
    for cut in range(len(words)):
        assert model.prob(words[:cut], words[cut]) == pytest.approx(probs[cut], rel=1e-12)
    state, total = model.begin_state(), 0.0
    for word in words + ["</S>"]:
        log10, state = model.score_word(state, word)
        total += log10
    assert total == pytest.approx(np.log10(probabilities(model, [test[1]])).sum(), rel=1e-9)
    with pytest.raises(SnmInputError, match="packed layout keeps no unadjusted"):
        model.distribution(words[:2], unadjusted=True)


def test_a_packed_table_finds_every_key_and_settles_twins():
    """Keys that share the slot and the 16 stored bits are settled by their whole keys;
    keys absent from a table are found with probability about 2^-16 a probe."""
    rng = np.random.default_rng(3)
    keys = np.unique(rng.integers(0, 2**64, 300_000, dtype=np.uint64, endpoint=False))
    twins = keys[:2000] ^ np.uint64(1)  # the same bits but the lowest: twins of the first
    keys = np.unique(np.concatenate([keys, twins]))
    values = rng.random(len(keys)).astype(np.float32) + np.float32(0.5)
    table = hashed.EntryTable.build(keys, values, packed=True)
    rows = table.find(keys)
    np.testing.assert_array_equal(rows, np.arange(len(keys)))
    assert np.all(np.abs(table.value_of(rows) / values - 1) <= VALUE_ERROR)
    absent = rng.integers(0, 2**64, 200_000, dtype=np.uint64, endpoint=False)
    absent = absent[~np.isin(absent, keys)]
    assert np.mean(table.find(absent) >= 0) < 10 * 2.0 ** -16


def test_eval_and_compact_of_a_packed_model(pair, tmp_path, capsys):
    source, packed, test = pair
    text = tmp_path / "test.txt"
    text.write_text("\n".join(test) + "\n")
    assert main(["eval", "--model", str(packed), str(text)]) == 0
    out = capsys.readouterr().out
    assert "Adjusted model" in out and "Unadjusted" not in out
    assert main(["eval", "--model", str(packed), "--unadjusted", str(text)]) == 2
    assert "packed layout keeps no unadjusted" in capsys.readouterr().err
