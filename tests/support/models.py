"""Small models built by the real stages (count, join, fit, apply) on the synthetic corpus,
and a perplexity computed from a model's Parquet rows by Python dictionaries."""

import math

from snm.commands import apply as apply_cmd
from snm.commands import count as count_cmd
from snm.commands import join as join_cmd
from snm_core.fit.selection import FitOptions, fit_directory
from snm_core.scoring.compact import read_model_tables
from snm_core.text import synthetic
from snm_core.text.config import parse_config
from snm_core.text.features import FeatureExtractor
from snm_core.text.tokenize import SentenceBatch
from snm_core.text.vocab import Vocabulary
from support.counts import write_lines

#: A skip-gram configuration with n-grams, tied skips and several remote words.
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
