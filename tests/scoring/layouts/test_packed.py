"""The packed layout: the hashed tables with 3-byte entries (16 stored key bits, 8-bit
codes in each table's codebook), for any model; checked against the float model and the
brute-force perplexity, through batch scoring, distributions, states and the CLI."""

import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.models import brute_force_perplexity

from snm.cli import main
from snm_core.io.errors import SnmInputError
from snm_core.scoring.compact import compile_model, load_model
from snm_core.scoring.layouts import hashed_tables
from snm_core.text.tokenize import tokenize


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


def value_ratios(float_model, packed_model):
    """``(least, largest)`` ratio of a packed value to the float one over both tables (the
    same keys, in order)."""
    ratios = []
    for table in ("features", "links"):
        exact, packed = getattr(float_model, table), getattr(packed_model, table)
        rows = np.arange(len(exact.entries))
        ratios.append(packed.value_of(rows) / exact.value_of(rows))
    ratios = np.concatenate(ratios)
    return float(ratios.min()), float(ratios.max())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(2.0 ** -40, 2.0 ** 20), min_size=1, max_size=2000),
       st.floats(2.0 ** -45, 2.0 ** 25))
def test_a_value_is_coded_as_the_nearest_centre(sample, value):
    """In log2, the code's value is the nearest of the codebook's centres (brute force);
    zero and the shared marker keep their own codes."""
    codebook = hashed_tables.fit_codebook(sample)
    code = int(hashed_tables.value_codes([value], codebook)[0])
    centres = np.log2(codebook[1:-1].astype(np.float64))
    assert 1 <= code <= 254
    assert abs(centres[code - 1] - np.log2(value)) <= np.min(np.abs(centres - np.log2(value))) \
        + 1e-9
    codes = hashed_tables.value_codes([0.0, hashed_tables.SHARED], codebook)
    assert codebook[codes].tolist() == [0.0, -1.0]


def test_a_fitted_codebook_codes_closer_than_even_steps():
    """Lloyd's centres on log-normal values (as M values spread): a coded value's mean
    error is below that of 254 centres in even log2 steps over the same range."""
    values = np.exp2(np.random.default_rng(1).normal(-12, 5, 200_000))

    def mean_error(codebook):
        decoded = codebook[hashed_tables.value_codes(values, codebook)]
        return np.mean(np.abs(decoded / values - 1))

    even = np.zeros(256, np.float32)
    even[1:-1] = np.exp2(np.linspace(np.log2(values.min()), np.log2(values.max()), 254))
    even[-1] = hashed_tables.SHARED
    assert mean_error(hashed_tables.fit_codebook(values)) < 0.9 * mean_error(even)


def test_packed_model_is_the_float_model_within_its_rounding(pair):
    """Each event's probability is a ratio of sums of values, each coded within the
    tables' least and largest ratio to the float value, so its ratio to the float
    model's is within theirs; the perplexity is the brute-force one's within 1% and the
    float model's within 0.1%; the arrays are under 40% of the hashed layout's."""
    source, packed, test = pair
    float_model, packed_model = load_model(str(source)), load_model(str(packed))
    assert packed_model.features.packed and packed_model.links.packed
    least, largest = value_ratios(float_model, packed_model)
    ratio = probabilities(packed_model, test) / probabilities(float_model, test)
    assert np.all(ratio <= largest / least * (1 + 1e-6))
    assert np.all(ratio >= least / largest * (1 - 1e-6))
    assert not np.all(ratio == 1)  # values were rounded
    ppl = packed_model.evaluate_lines(test)
    assert list(ppl) == ["adjusted"]
    assert ppl["adjusted"]["perplexity"] == pytest.approx(
        brute_force_perplexity(source, test, adjusted=True), rel=0.01)
    # The codebooks fitted to the values as scoring reads them (a feature's M_f* as often
    # as it fires): the frequent features' values, in every event's sums, coded closely.
    assert ppl["adjusted"]["perplexity"] == pytest.approx(
        float_model.evaluate_lines(test)["adjusted"]["perplexity"], rel=0.001)
    sizes = {d: sum(f.stat().st_size for f in (d / "compact").glob("*.npy"))
             for d in (source, packed)}
    assert sizes[packed] < 0.4 * sizes[source]


def test_packed_distributions_states_and_scores_agree(pair):
    source, packed, test = pair
    model = load_model(str(packed))
    words = test[1].split()
    # M_f* and each M_fw are coded apart: a distribution sums to 1 within their ratios.
    least, largest = value_ratios(load_model(str(source)), model)
    assert least / largest <= model.distribution(words[:3]).sum() <= largest / least
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
    table = hashed_tables.EntryTable.build(keys, values, packed=True)
    rows = table.find(keys)
    np.testing.assert_array_equal(rows, np.arange(len(keys)))
    codebook = table.codebook
    np.testing.assert_array_equal(table.value_of(rows),
                                  codebook[hashed_tables.value_codes(values, codebook)])
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


def test_a_codebook_sample_draws_each_row_as_often_as_its_count(tmp_path):
    """The codebooks' samples weigh a value by how often scoring reads it: a row of count
    c is drawn about c / step times, across buckets, and a frequent feature's value is
    then coded within 0.1% where an unweighted fit left it in the sparse tail."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from snm_core.io import model_files, tables
    from snm_core.scoring.layouts import hashed_build
    rng = np.random.default_rng(7)
    heavy = 2.7e-3  # one feature's M_f*, in the sparse tail of the others
    buckets = 4
    values = [rng.lognormal(-12, 2.0, 5000) for _ in range(buckets)]
    counts = [np.ones(5000, np.int64) for _ in range(buckets)]
    values[2][17], counts[2][17] = heavy, 20_000  # fires in most events
    for b in range(buckets):
        rows_path, values_path = model_files.bucket_paths(str(tmp_path), "features", b, buckets)
        n = len(values[b])
        pq.write_table(pa.table({
            "feature": np.arange(n, dtype=np.uint64), "tag": np.zeros(n, np.int16),
            "type": np.zeros(n, np.int16), "count": counts[b],
            "diversity": np.ones(n, np.int64), "words": [[1]] * n}, schema=tables.FEATURES),
            rows_path)
        pq.write_table(pa.table({"m_star": values[b]}, schema=tables.M_STAR_VALUES),
                       values_path)
    sample = hashed_build._usage_sample(str(tmp_path), buckets, "features", "m_star")
    total = 20_000 + 4 * 5000 - 1
    drawn = np.count_nonzero(sample == heavy)
    assert abs(len(sample) - hashed_tables.CODEBOOK_SAMPLE) <= 1
    assert drawn == pytest.approx(hashed_tables.CODEBOOK_SAMPLE * 20_000 / total, abs=1)
    everything = np.concatenate(values)

    def error(codebook):
        return abs(codebook[hashed_tables.value_codes([heavy], codebook)[0]] / heavy - 1)

    assert error(hashed_tables.fit_codebook(sample)) < 1e-3
    assert error(hashed_tables.fit_codebook(everything)) > 1e-3  # unweighted: the tail
