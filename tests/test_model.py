import math
import subprocess
import sys

import numpy as np
import pytest
from countutil import write_lines
from modelutil import speedups

from snm.cli import main
from snm.commands import apply as apply_cmd
from snm.commands import count as count_cmd
from snm.commands import join as join_cmd
from snm_core.fit.selection import FitOptions, fit_directory
from snm_core.model.compact import load_model, read_model_tables
from snm_core.model.layouts.hashed import KeyIndex
from snm_core.model.scoring import SCORE_BATCH_LINES
from snm_core.stages import manifests
from snm_core.text import synthetic
from snm_core.text.config import parse_config
from snm_core.text.vocab import Vocabulary

SKIP = ("ngram_extractor { min_n: 0 max_n: 3 }\n"
        "skip_ngram_extractor { max_context_words: 2 max_remote_words: 1 max_skip_length: 6 "
        "tie_skip_length: true }")


def build_model(root, config, tagged, variant="unlexicalized"):
    """count -> join -> fit -> apply on the synthetic corpus; returns (model dir, test lines)."""
    train = synthetic.generate(600, seed=21)
    write_lines(str(root / "a.txt"), train[:300])
    write_lines(str(root / "b.txt"), train[300:])
    write_lines(str(root / "dev.txt"), synthetic.generate(80, seed=22))
    test = synthetic.generate(80, seed=23) + ["begin2 never seen words here", "the noun1"]
    write_lines(str(root / "test.txt"), test)
    if config not in ("5gram", "skip10gram", "skip5gram"):
        (root / "config.cfg").write_text(config)
        config = str(root / "config.cfg")
    specs = ["--train", f"a={root}/a.txt", "--train", f"b={root}/b.txt"] if tagged else \
        ["--train", f"{root}/[ab].txt"]
    count_cmd.main(["--config", config, *specs, "--min_count", "2", "--out",
                     str(root / "counts"), "--num_buckets", "3"])
    join_cmd.main(["--count", str(root / "counts"), "--heldout", str(root / "dev.txt"),
                    "--out", str(root / "heldout")])
    fit_directory(str(root / "heldout"), str(root / "adjust"),
                  FitOptions(variants=(variant,), epochs=2, hash_size=1 << 16, batch_size=128),
                  say=lambda *_: None)
    apply_cmd.main(["--count", str(root / "counts"), "--fit", str(root / "adjust"),
                     "--out", str(root / "model")])
    return root / "model", test


@pytest.fixture(scope="module")
def ngram_model(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("ngram"), "5gram", tagged=False)


@pytest.fixture(scope="module")
def tagged_skip_model(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("skip"), SKIP, tagged=True, variant="lexicalized")


@pytest.mark.parametrize("which", ["ngram_model", "tagged_skip_model"])
def test_distribution_agrees_with_scoring_the_sentence(which, request):
    """P(w | context) from ``distribution`` is what scoring ``context w`` gives its last
    word (the compiled scoring path)."""
    model_dir, test = request.getfixturevalue(which)
    model = load_model(str(model_dir))
    for line in test[:6]:
        words = line.split()
        for cut in range(len(words)):
            context, word = words[:cut], words[cut]
            (_, _, scores), = list(model.score_lines([" ".join(words[:cut + 1])]))
            for unadjusted, probs in ((False, scores.prob), (True, scores.prob_unadjusted)):
                got = model.distribution(context, [word], unadjusted=unadjusted)[0]
                assert got == pytest.approx(probs[cut], rel=1e-9), (context, word)


@pytest.mark.parametrize("which", ["ngram_model", "tagged_skip_model"])
def test_probabilities_sum_to_one(which, request):
    model_dir, test = request.getfixturevalue(which)
    model = load_model(str(model_dir))
    rng = np.random.default_rng(0)
    words = [w for w in model.vocab.words[3:]]
    contexts = [[], ["begin1"], test[0].split()[:3]] + [
        list(rng.choice(words, size=rng.integers(1, 9))) for _ in range(8)]
    for context in contexts:
        for unadjusted in (False, True):
            total = model.distribution(context, unadjusted=unadjusted).sum()
            assert total == pytest.approx(1.0, abs=1e-6), (context, unadjusted)


def brute_force_perplexity(model_dir, lines, adjusted):
    """Perplexity straight from the model's Parquet rows, by Python dictionaries."""
    feats, matrix, manifest = read_model_tables(str(model_dir))
    vocab = Vocabulary.load(model_dir / "vocab.txt")
    config = parse_config(manifest["config"])
    m_star = dict(zip(feats["feature"].to_pylist(), feats["m_star"].to_pylist()))
    f_count = dict(zip(feats["feature"].to_pylist(), feats["count"].to_pylist()))
    link = {}
    for f, w, c, m in zip(*(matrix[c].to_pylist() for c in ("feature", "word", "count", "m"))):
        link[(f, w)] = m if adjusted else c / f_count[f]
    seen = {w for (f, w) in link}
    from snm_core.text.features import FeatureExtractor
    from snm_core.text.tokenize import SentenceBatch
    extractor = FeatureExtractor(config, manifest["tags"])
    logp, n = 0.0, 0
    for line in lines:
        ids = [i if i in seen else 2 for i in vocab.ids(line.split()).tolist()]
        events = extractor.extract(SentenceBatch.from_lists([ids]))
        for e in range(events.num_events):
            keys = [k for k in events.key[events.event == e].tolist() if k in m_star]
            target = int(events.target[e])
            num = sum(link.get((k, target), 0.0) for k in keys)
            den = sum(m_star[k] if adjusted else 1.0 for k in keys)
            logp += math.log(num / den)
            n += 1
    return math.exp(-logp / n)


@pytest.mark.parametrize("which", ["ngram_model", "tagged_skip_model"])
def test_perplexity_equals_brute_force(which, request):
    model_dir, test = request.getfixturevalue(which)
    reports = load_model(str(model_dir)).evaluate_lines(test, threads=2)
    for name, adjusted in (("adjusted", True), ("unadjusted", False)):
        expected = brute_force_perplexity(model_dir, test, adjusted)
        # compact/ stores M_f*, M_fw and c(w|f) as float32 (relative error < 6e-8 each);
        # the brute force computes in float64 from the Parquet tables.
        assert reports[name]["perplexity"] == pytest.approx(expected, rel=1e-6)
    assert reports["adjusted"]["sentences"] == len(test)
    assert reports["adjusted"]["oov"] >= 4  # "never seen words here"


def test_model_matches_the_trainer_on_heldout(ngram_model):
    """M from apply equals M in the trainer: the model's dev perplexity is the fit's."""
    model_dir, _ = ngram_model
    fit = manifests.Fit.read(str(model_dir.parent / "adjust"))
    dev = (model_dir.parent / "dev.txt").read_text().splitlines()
    report = load_model(str(model_dir)).evaluate_lines(dev)
    assert report["adjusted"]["perplexity"] == pytest.approx(fit["heldout_perplexity"], rel=1e-5)
    assert report["unadjusted"]["perplexity"] == pytest.approx(
        fit["heldout_perplexity_unadjusted"], rel=1e-9)


@pytest.mark.parametrize("which", ["ngram_model", "tagged_skip_model"])
def test_eval_json_and_score(which, request, tmp_path, capsys):
    model_dir, test = request.getfixturevalue(which)
    test_path = model_dir.parent / "test.txt"
    assert main(["eval", "--model", str(model_dir), str(test_path), "--json"]) == 0
    import json
    reports = json.loads(capsys.readouterr().out)
    assert sorted(reports) == ["adjusted", "unadjusted"]  # eval.json's shape
    for key in ("perplexity", "perplexity_excluding_oov", "oov", "words", "sentences"):
        assert key in reports["adjusted"] and key in reports["unadjusted"]
    assert reports["adjusted"]["words"] == sum(len(t.split()) + 1 for t in test)
    assert main(["score", "--model", str(model_dir), str(test_path), "--out",
                 str(tmp_path / "s.tsv")]) == 0
    rows = [r.split("\t") for r in (tmp_path / "s.tsv").read_text().splitlines()]
    assert len(rows) == len(test) and rows[0][3] == test[0]
    total = sum(float(r[0]) for r in rows)
    assert total == pytest.approx(reports["adjusted"]["log10_prob"], abs=1e-6 * len(rows))


def test_score_writes_one_row_per_line_across_batches(ngram_model, tmp_path):
    """More lines than a scoring batch, an empty line among them: one row per line, in order."""
    model_dir, test = ngram_model
    lines = (test * (2 * SCORE_BATCH_LINES // len(test) + 1))[:2 * SCORE_BATCH_LINES + 5]
    lines[SCORE_BATCH_LINES + 1] = ""
    text = tmp_path / "t.txt"
    text.write_text("\n".join(lines) + "\n")
    assert main(["score", "--model", str(model_dir), str(text), "--out",
                 str(tmp_path / "s.tsv")]) == 0
    rows = [r.split("\t") for r in (tmp_path / "s.tsv").read_text().splitlines()]
    assert [r[3] for r in rows] == lines
    assert rows[SCORE_BATCH_LINES + 1][:3] == ["0", "0", "0"]
    again = next(i for i in range(SCORE_BATCH_LINES, len(lines)) if lines[i] == lines[0])
    assert rows[again] == rows[0]  # the same sentence scores the same in a later batch


def test_kenlm_scores_the_exported_arpa_like_snm_eval(ngram_model, tmp_path):
    kenlm = pytest.importorskip("kenlm")
    model_dir, test = ngram_model
    arpa = tmp_path / "model.arpa"
    assert main(["export-arpa", "--model", str(model_dir), "--out", str(arpa)]) == 0
    lm = kenlm.Model(str(arpa))
    total = sum(lm.score(line, bos=True, eos=True) for line in test)
    words = sum(len(line.split()) + 1 for line in test)
    kenlm_ppl = 10 ** (-total / words)
    ours = load_model(str(model_dir)).evaluate_lines(test)["adjusted"]["perplexity"]
    assert abs(kenlm_ppl - ours) / ours < 1e-4


def test_tagged_ngram_model_exports_summed_over_tags(tmp_path):
    kenlm = pytest.importorskip("kenlm")
    model_dir, test = build_model(tmp_path, "5gram", tagged=True)
    arpa = tmp_path / "tagged.arpa"
    assert main(["export-arpa", "--model", str(model_dir), "--out", str(arpa)]) == 0
    lm = kenlm.Model(str(arpa))
    total = sum(lm.score(line, bos=True, eos=True) for line in test)
    kenlm_ppl = 10 ** (-total / sum(len(line.split()) + 1 for line in test))
    ours = load_model(str(model_dir)).evaluate_lines(test)["adjusted"]["perplexity"]
    assert abs(kenlm_ppl - ours) / ours < 1e-4


def test_export_of_a_skip_gram_model_is_a_clear_error(tagged_skip_model, tmp_path):
    model_dir, _ = tagged_skip_model
    proc = subprocess.run([sys.executable, "-m", "snm", "export-arpa", "--model", str(model_dir),
                           "--out", str(tmp_path / "x.arpa")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "ARPA holds only n-gram models" in proc.stderr


def test_key_index_finds_every_key_and_nothing_else():
    rng = np.random.default_rng(4)
    for n in (0, 1, 7, 1000, 50000):
        keys = np.unique(rng.integers(0, 2 ** 64, size=n, dtype=np.uint64))
        index = KeyIndex(keys)
        assert np.array_equal(index.find(keys), np.arange(len(keys)))
        others = rng.integers(0, 2 ** 64, size=1000, dtype=np.uint64)
        others = others[~np.isin(others, keys)]
        assert np.all(index.find(others) == -1)


@pytest.mark.parametrize("chunks", [1, 7])
def test_entry_table_finds_every_key_and_its_value_also_where_stored_bits_coincide(chunks):
    """compact/'s tables store 32 bits of a key below its slot's; keys that agree in all
    of those (built here by flipping bits below them) are settled by whole keys."""
    from snm_core.model.layouts.hashed import EntryTable, EntryTableWriter, table_bits
    rng = np.random.default_rng(6)
    for n in (0, 1, 7, 1000, 50000):
        keys = rng.integers(0, 2 ** 64, size=n, dtype=np.uint64)
        below = 64 - table_bits(2 * n) - 32  # how many key bits lie below the stored ones
        twins = keys[: n // 10] ^ (np.uint64(1) << rng.integers(0, below, n // 10).astype(
            np.uint64))
        keys = np.unique(np.concatenate([keys, twins]))
        values = rng.random(len(keys)).astype(np.float32)
        truth = dict(zip(keys.tolist(), values.tolist()))
        writer = EntryTableWriter(len(keys))
        for part in np.array_split(np.arange(len(keys)), chunks):
            writer.add(keys[part], values[part])
        table = EntryTable(*writer.finish())
        rows = table.find(keys)
        assert [truth[k] for k in keys.tolist()] == table.values[rows].tolist()
        others = rng.integers(0, 2 ** 64, size=1000, dtype=np.uint64)
        assert np.all(table.find(others[~np.isin(others, keys)]) == -1)


def test_compiled_lookups_use_the_slot_blocks_the_compact_arrays_are_written_with():
    from snm_core.model.layouts import hashed, hashed_kernels
    assert hashed_kernels._BLOCK_BITS == hashed.SLOT_BLOCK_BITS


def test_compiled_link_key_equals_the_numpy_one():
    """Scoring's compiled loop names links exactly as counting and the compact arrays do."""
    from snm_core.model.layouts import hashed_kernels
    from snm_core.text.hashing import link_key
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 2 ** 64, size=200, dtype=np.uint64)
    words = rng.integers(0, 2 ** 31, size=200).astype(np.int32)
    with speedups(False):  # hashing's numpy path, as counting computes it
        expected = link_key(keys, words)
    assert [int(hashed_kernels._link_key(k, w)) for k, w in zip(keys, words)] == expected.tolist()


def test_compact_arrays_do_not_depend_on_the_sort_partitions(ngram_model, tmp_path):
    """The external sort of link keys gives the same arrays with many partitions as with one."""
    import shutil

    from snm_core.model.compact import compile_model
    model_dir, _ = ngram_model
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    compile_model(str(copy), partition_links=64)
    names = sorted(p.name for p in (model_dir / "compact").iterdir())
    assert names == sorted(p.name for p in (copy / "compact").iterdir())
    for name in names:
        assert (model_dir / "compact" / name).read_bytes() == (copy / "compact" / name).read_bytes()
