"""One loaded Model shared by threads scores exactly as one thread does.

A server loads a model once and scores requests on many threads; the scoring
kernels release the GIL, so the threads really run at once.  Any scratch
buffer or cache shared between calls would mix their numbers here.
"""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from support.models import SKIP, build_model

from snm_core.scoring.compact import load_model
from snm_core.text import synthetic

THREADS = 4
ROUNDS = 3


@pytest.fixture(scope="module")
def skip_model(tmp_path_factory):
    """A tagged skip-gram model (many feature types, two tags) and test sentences."""
    model_dir, test = build_model(tmp_path_factory.mktemp("threads"), SKIP, tagged=True)
    return str(model_dir), test + synthetic.generate(400, seed=24)


def scores_of(model, lines, batch_lines):
    """Every event's (adjusted, unadjusted) probability, scored on this thread alone."""
    parts = list(model.score_lines(lines, batch_lines=batch_lines, threads=1))
    return (np.concatenate([s.prob for _, _, s in parts]),
            np.concatenate([s.prob_unadjusted for _, _, s in parts]))


def work(model, lines, contexts, seed):
    """What one thread asks the model: batches of several sizes, an evaluation (on a
    pool of its own), distributions; in an order of its own."""
    rng = np.random.default_rng(seed)
    results = {}
    for name in rng.permutation(["small", "large", "eval", "dist"]):
        if name == "small":
            results[name] = scores_of(model, lines, 7)
        elif name == "large":
            results[name] = scores_of(model, lines, 500)
        elif name == "eval":
            results[name] = model.evaluate_lines(lines, threads=2)
        else:
            results[name] = [model.distribution(c, unadjusted=u).tolist()
                             for c in contexts for u in (False, True)]
    return results


def run_threads(model, lines, contexts):
    """:func:`work` on THREADS threads started together, ROUNDS times each."""
    barrier = threading.Barrier(THREADS)

    def thread(i):
        barrier.wait()
        return [work(model, lines, contexts, seed=10 * i + r) for r in range(ROUNDS)]

    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(thread, i) for i in range(THREADS)]
        return [r for f in futures for r in f.result()]  # a thread's exception raises here


def assert_same(result, expected):
    for name in ("small", "large"):
        for got, want in zip(result[name], expected[name]):
            np.testing.assert_array_equal(got, want)
    assert result["eval"] == expected["eval"]
    assert result["dist"] == expected["dist"]


def test_threads_sharing_a_model_score_exactly_as_one_thread(skip_model):
    model_dir, lines = skip_model
    contexts = [[], ["begin1"], lines[0].split()[:4], ["the", "zzz", "noun1"]]
    # A model used by threads from its first call (nothing warmed up on this one) ...
    shared = load_model(model_dir)
    concurrent = run_threads(shared, lines, contexts)
    # ... and the same calls on one thread, on a model of its own.
    alone = load_model(model_dir)
    expected = work(alone, lines, contexts, seed=0)
    assert expected["small"][0].shape == (sum(len(s.split()) + 1 for s in lines),)
    np.testing.assert_array_equal(expected["small"][0], expected["large"][0])
    for result in concurrent:
        assert_same(result, expected)
    assert_same(work(shared, lines, contexts, seed=1), expected)  # and after the threads
