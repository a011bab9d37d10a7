"""Counts selected for a size (``snm train --prune_to`` of a skip-gram model): the count
the chosen thresholds would have given, and a model that fits."""

import filecmp
import os

import numpy as np
import pytest

from snm_core.count import continuation, size_thresholds, thresholds
from snm_core.text.config import load_config


def _count(tmp_path, name, text, vocab, extra=()):
    from snm.commands import count as count_cmd
    out = str(tmp_path / name)
    assert count_cmd.main(["--config", "skip5gram", "--vocab", vocab, "--train", text,
                           "--num_buckets", "4", "--out", out, *extra]) == 0
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from support.counts import write_lines

    from snm_core.text import synthetic
    from snm_core.text.vocab import Vocabulary
    folder = tmp_path_factory.mktemp("select")
    sentences = synthetic.generate(600, seed=17)
    text = write_lines(str(folder / "train.txt"), sentences)
    vocab = str(folder / "vocab.txt")
    Vocabulary(sorted({w for s in sentences for w in s.split()})).save(vocab)
    return folder, text, vocab


def _specs(manifest):
    return ([arg for name, n in manifest["min_link_count"].items()
             for arg in ("--min_link_count", f"{name}={n}")]
            + [arg for name, n in manifest["min_feature_count"].items()
               for arg in ("--min_feature_count", f"{name}={n}")])


def _links(directory):
    """{(feature key, word): (count, continuation)} of a count directory."""
    import pyarrow.parquet as pq
    found = {}
    for name in sorted(os.listdir(directory)):
        if name.startswith("links-"):
            table = pq.read_table(os.path.join(directory, name)).to_pydict()
            for f, w, c in zip(table["feature"], table["word"], table["count"]):
                found[f, w] = c
    return found


@pytest.mark.parametrize("given", [(), ("--min_feature_count", "skip=2",
                                        "--min_link_count", "skip=2")])
def test_selected_counts_are_what_counting_with_their_thresholds_gives(corpus, tmp_path,
                                                                      given):
    """Thresholding a finished count again (whose links may already have been thresholded,
    so that C(f,*) exceeds its links' sum) at a whole level gives the files a count of the
    text with those thresholds writes: C(f,*), diversity and continuation counts
    included; the links and features kept are the ones the histograms predicted."""
    from pipelines import select
    from snm_core.stages import manifests
    _, text, vocab = corpus
    source = _count(tmp_path, "source", text, vocab, given)
    total = manifests.Count.read(source).totals["links"]
    first = select.run(select.SelectOptions(count=source, out=str(tmp_path / "first"),
                                            target_links=total // 3), summary=False)
    assert first["selection"]["level"] > 1
    assert first["totals"]["links"] == first["selection"]["links"] <= total // 3
    assert first["totals"]["features"] == first["selection"]["features"]
    # the level's own thresholds, counted directly, and selected for exactly their links
    direct = _count(tmp_path, "direct", text, vocab, _specs(first))
    level_links = manifests.Count.read(direct).totals["links"]
    assert level_links <= first["totals"]["links"]
    selected = select.run(select.SelectOptions(count=source, out=str(tmp_path / "selected"),
                                               target_links=level_links), summary=False)
    assert selected["min_link_count"] == first["min_link_count"]
    names = sorted(n for n in os.listdir(direct) if n.endswith(".parquet"))
    match, mismatch, errors = filecmp.cmpfiles(direct, tmp_path / "selected", names,
                                               shallow=False)
    assert len(match) == 8 and not mismatch and not errors
    ours, theirs = selected["totals"], manifests.Count.read(direct).totals
    for name in ("links", "features", "link_count_sum", "feature_occurrences", "tokens",
                 "below_threshold_occurrences"):
        assert ours[name] == theirs[name], name


def test_a_share_of_a_step_keeps_links_between_the_levels_and_every_link_they_extend(
        corpus, tmp_path):
    """A target between two levels keeps every link of the higher level, some links of
    the lower one only, and with each kept link the link it extends (its feature less the
    oldest word, the same word): the model stays suffix-closed."""
    import pyarrow.parquet as pq

    from pipelines import select
    from snm_core.stages import manifests
    _, text, vocab = corpus
    source = _count(tmp_path, "source", text, vocab)
    total = manifests.Count.read(source).totals["links"]
    chosen = select.run(select.SelectOptions(count=source, out=str(tmp_path / "chosen"),
                                             target_links=total // 4), summary=False)
    partial = chosen["selection"]["partial"]
    assert partial and 0 < partial["share"] < 1
    upper = _links(_count(tmp_path, "upper", text, vocab, _specs(chosen)))
    lower_thresholds = {**chosen["min_link_count"], **partial["below"]}
    lower = _links(_count(tmp_path, "lower", text, vocab,
                          [arg for name, n in lower_thresholds.items() if n > 1
                           for arg in ("--min_link_count", f"{name}={n}")]))
    kept = _links(str(tmp_path / "chosen"))
    assert set(upper) < set(kept) < set(lower)
    assert all(lower[k] == c for k, c in kept.items())
    # suffix-closed: the key of each feature from its type and words
    types = manifests.Count.read(source)["feature_types"]
    parents = continuation.parent_types(load_config("skip5gram"))
    key_of, words_of = {}, {}
    for name in sorted(os.listdir(source)):
        if name.startswith("features-"):
            table = pq.read_table(os.path.join(source, name)).to_pydict()
            for f, t, words in zip(table["feature"], table["type"], table["words"]):
                key_of[t, tuple(words)] = f
                words_of[f] = (t, tuple(words))
    extended = 0
    for feature, word in kept:
        t, words = words_of[feature]
        if parents[t] >= 0 and types[parents[t]] != "0-gram":
            assert (key_of[parents[t], words[1:]], word) in kept
            extended += 1
    assert extended > 100


def test_the_ladder_raises_every_threshold_with_the_level_and_keeps_parents_below():
    """Each type's threshold never falls as the level rises, never goes below the count's
    own, and is at least its parent type's (the kept model stays suffix-closed); skip-gram
    links take the level itself, shorter n-grams less."""
    config = load_config("skip10gram")
    types = config.feature_types()
    parents = continuation.parent_types(config)
    given = thresholds.per_type(thresholds.parse(["skip=5", "9-gram=2"], types, parents),
                                [t.name for t in types])
    previous = given
    for level in range(1, 40):
        minimum = size_thresholds.ladder(level, types, given)
        assert (minimum >= previous).all() and (minimum >= given).all()
        has_parent = parents >= 0
        assert (minimum[has_parent] >= minimum[parents[has_parent]]).all()
        assert minimum[0] == 1  # the empty feature
        assert all(minimum[i] >= level for i, t in enumerate(types) if t.kind == "skip")
        previous = minimum


def test_histograms_count_links_and_features_at_each_threshold(corpus, tmp_path):
    """What :func:`size_thresholds.kept` reads off the histograms is what keeping the
    links seen that often (and those one less often in the bins below a cut) leaves,
    counted directly."""
    import pyarrow.parquet as pq
    _, text, vocab = corpus
    source = _count(tmp_path, "plain", text, vocab)
    config = load_config("skip5gram")
    types = config.feature_types()
    widths = size_thresholds.root_widths(types, continuation.parent_types(config))
    tables = [(pq.read_table(os.path.join(source, f"features-{b:05d}-of-00004.parquet")),
               pq.read_table(os.path.join(source, f"links-{b:05d}-of-00004.parquet")))
              for b in range(4)]
    parts = [size_thresholds.histograms(f, lk, len(types), widths) for f, lk in tables]
    counts = parts[0] + parts[1] + parts[2] + parts[3]
    rng = np.random.default_rng(3)
    for _ in range(6):
        minimum = rng.integers(1, 5, len(types))
        lower = np.maximum(minimum - rng.integers(0, 2, len(types)), 1)
        cut = int(rng.integers(1, size_thresholds.BINS))
        for partial in (None, (lower, cut)):
            links = features = 0
            for f, lk in tables:
                link_type = np.repeat(f["type"].to_numpy(), f["diversity"].to_numpy())
                count = lk["count"].to_numpy()
                keep = count >= minimum[link_type]
                if partial is not None:
                    bins = size_thresholds.link_bins(f, lk, widths)
                    keep |= (count >= lower[link_type]) & (bins < cut)
                links += keep.sum()
                owner = np.repeat(np.arange(f.num_rows), f["diversity"].to_numpy())
                features += len(np.unique(owner[keep]))
            assert size_thresholds.kept(counts, minimum, partial) == (features, links)


@pytest.mark.parametrize("layout", ["packed", "hashed"])
def test_predicted_bytes_bound_the_built_scoring_directory(tmp_path, layout):
    """The size the selection predicts for a model's features and links is at least its
    scoring directory's, and within the margin kept for manifests and overflow entries."""
    from snm.cli import main
    from snm_core.scoring import compact
    from snm_core.stages import manifests
    from snm_core.text import synthetic
    train, dev, test = synthetic.write_corpus(str(tmp_path / "corpus"), 600, 80, 80, seed=4)
    out = tmp_path / "run"
    assert main(["train", "--config", "skip5gram", "--train", train, "--heldout", dev,
                 "--test", test, "--out", str(out), "--min_count", "2", "--num_buckets", "4",
                 "--metafeatures", "unlexicalized", "--epochs", "1", "--layout", layout]) == 0
    model = manifests.Model.read(str(out / "model"))
    predicted = compact.predicted_scoring_bytes(
        model.totals["features"], model.totals["links"], layout, model["vocabulary_size"],
        (out / "model" / "vocab.txt").stat().st_size)
    built = compact.scoring_bytes(str(out / "model"))
    assert built <= predicted <= built + compact.SCORING_EXTRA_BYTES


def test_train_fits_a_skipgram_model_on_counts_selected_for_its_size(tmp_path, capsys):
    """``snm train --prune_to SIZE`` of a skip-gram model fits on selected counts: the
    model, apply's, fits the size with no pruning after the fit, and a re-run is up to
    date."""
    from support.runs import train_argv

    from snm.cli import main
    from snm_core.scoring.compact import scoring_bytes
    from snm_core.stages import manifests
    from snm_core.text import synthetic
    train, dev, test = synthetic.write_corpus(str(tmp_path / "corpus"), 600, 80, 80, seed=4)
    argv = train_argv({"train": train, "dev": dev, "test": test}, tmp_path / "run")
    argv[argv.index("5gram")] = "skip5gram"
    assert main(["train", *argv, "--layout", "packed"]) == 0
    whole = scoring_bytes(str(tmp_path / "run" / "model"))
    capsys.readouterr()
    target = whole // 3
    size = f"{target // 1024}K"
    assert main(["train", *argv, "--layout", "packed", "--prune_to", size]) == 0
    out = capsys.readouterr().out
    assert "select  level" in out
    run = tmp_path / "run"
    selected = manifests.Count.read(str(run / "selected"))
    model = manifests.Model.read(str(run / "model"))
    assert model.totals["links"] == selected.totals["links"]
    assert not (run / "pruned").exists() and "prune " not in out
    card = (run / "model" / "model_card.md").read_text()
    assert f"counts selected for at most {(target // 1024) * 1024:,} bytes (packed)" in card
    assert scoring_bytes(str(run / "model")) <= (target // 1024) * 1024
    assert main(["train", *argv, "--layout", "packed", "--prune_to", size]) == 0
    assert capsys.readouterr().out.count("up to date") == 7


def test_snm_select_on_the_command_line(corpus, tmp_path, capsys):
    """``snm select`` writes a count directory that says what it was selected for; a size
    no thresholds reach is a one-line error."""
    from snm.cli import main
    from snm_core.stages import manifests
    _, text, vocab = corpus
    source = _count(tmp_path, "source", text, vocab)
    capsys.readouterr()
    out = tmp_path / "selected"
    assert main(["select", "--count", source, "--out", str(out), "--target_size", "300K",
                 "--layout", "packed"]) == 0
    assert "snm select: level" in capsys.readouterr().out
    selected = manifests.Count.read(str(out))
    assert selected["selection"]["target_size"] == 300 * 1024
    assert selected["selection"]["predicted_bytes"] <= 300 * 1024
    assert main(["select", "--count", source, "--out", str(tmp_path / "tiny"),
                 "--target_size", "2K", "--layout", "packed"]) == 2
    err = capsys.readouterr().err
    assert "give a larger size" in err and len(err.strip().splitlines()) == 1
