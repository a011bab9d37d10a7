"""The count by the paper's definitions, in plain Python over words: the oracle of the count
and feature tests.

Nothing here uses the code it checks (the configuration parser, the text reader and
tokenizer, the feature extractor, hashing, counting): a configuration is read by a regular
expression, a text file by ``bytes.split``, and every feature of every event is enumerated
by its words.  The definitions (the SNM paper, section 2 and Appendices A-B; DESIGN.md
4.1-4.2; the configuration fields and defaults of ``snm_core/text/config.py``'s docstring;
the input rules of docs/guide.md):

* a line ends at ``\\n``; a ``\\r`` before it and a byte order mark at the start of a file
  are dropped; a line that is not UTF-8 or holds a NUL byte is invalid, one with no word
  empty; neither is a sentence;
* a sentence's words are what ``str.split()`` gives; a word out of the vocabulary, and
  ``<S>`` or ``</S>`` inside a line, is ``<UNK>``;
* a sentence ``w_1 .. w_n`` is ``n + 1`` events: the targets ``w_1 .. w_n, </S>``, each
  after the context ``<S> w_1 .. w_{k-1}``;
* an n-gram feature is the ``n`` words right before the target (``n = 0``: the empty
  feature); a skip-gram ``(r, s, a)`` is ``r`` remote words, then ``s`` skipped ones, then
  the ``a`` adjacent to the target, and a tied one (``tie_skip_length``) leaves ``s`` out
  of its identity; no feature reaches past ``<S>``;
* an event's features ``F(e)`` form a set (a tied skip-gram seen at two skip lengths is
  in it once), and a tagged source's features carry its tag;
* ``C(f, w)`` is the number of events with ``f`` in ``F(e)`` and target ``w``;
  ``C(f, *) = sum_w C(f, w)``; the diversity is ``|{w : C(f, w) > 0}|``; the continuation
  count ``N1+(. f w)`` is the number of distinct ``f'`` with ``C(f', w) > 0`` that extend
  ``f`` by one older word: an n-gram extends the (n-1)-gram, a skip-gram ``(r, s, a)`` the
  ``(r-1, s, a)`` one (``r >= 2``), of the same tag.

A feature's identity is ``(tag, type name, words)``, its type named as the count's
manifest names it (``"3-gram"``, ``"skip(r=1,s=*,a=2)"``).
"""

import collections
import glob
import gzip
import json
import os
import re

import pyarrow as pa
import pyarrow.parquet as pq

MARKERS = ("<S>", "</S>", "<UNK>")
BOS, EOS, UNK = MARKERS
#: What the count's manifest totals of the text it read.
STATS = ("sentences", "tokens", "oov_tokens", "empty_lines", "invalid_lines", "marker_tokens",
         "events", "feature_occurrences")

#: Appendix A: the 5-gram configuration (the ``5gram`` preset).
APPENDIX_A = """// Sample config generating a straight 5-gram language model.
ngram_extractor {
  min_n: 0
  max_n: 4
}
"""

#: The fields of each extractor block, with their defaults (None: required; a function:
#: computed from the block's other fields).
DEFAULTS = {
    "ngram_extractor": {"min_n": 0, "max_n": None},
    "skip_ngram_extractor": {
        "max_context_words": None, "min_context_words": 1,
        "min_remote_words": 1, "max_remote_words": lambda b: b["max_context_words"],
        "min_adjacent_words": 0, "max_adjacent_words": lambda b: b["max_context_words"] - 1,
        "min_skip_length": 1, "max_skip_length": None, "tie_skip_length": False},
}


def config_blocks(text):
    """``[(block name, {field: value})]`` of a configuration in the Appendices' format."""
    text = re.sub(r"(//|#)[^\n]*", "", text)
    blocks = []
    for name, body in re.findall(r"(\w+)\s*\{([^}]*)\}", text):
        given = {field: value == "true" if value in ("true", "false") else int(value)
                 for field, value in re.findall(r"(\w+)\s*:\s*(\S+)", body)}
        block = {}
        for field, default in DEFAULTS[name].items():
            assert field in given or default is not None, f"{name}: {field} is required"
            if field in given or not callable(default):
                block[field] = given.get(field, default)
        for field, default in DEFAULTS[name].items():  # defaults computed from the others
            if field not in block:
                block[field] = default(block)
        blocks.append((name, block))
    return blocks


def feature_shapes(text):
    """The distinct ``(type, r, s, a)`` windows a configuration defines, ``type`` being
    ``("ngram", n)`` or ``("skip", r, s or "*", a)``."""
    shapes = set()
    for name, b in config_blocks(text):
        if name == "ngram_extractor":
            shapes.update((("ngram", n), 0, 0, n) for n in range(b["min_n"], b["max_n"] + 1))
            continue
        most = b["max_context_words"]
        for r in range(1, most + 1):
            for a in range(0, most):
                for s in range(1, b["max_skip_length"] + 1):
                    if (b["min_remote_words"] <= r <= b["max_remote_words"]
                            and b["min_adjacent_words"] <= a <= b["max_adjacent_words"]
                            and b["min_context_words"] <= r + a <= most
                            and b["min_skip_length"] <= s):
                        kind = ("skip", r, "*" if b["tie_skip_length"] else s, a)
                        shapes.add((kind, r, s, a))
    return shapes


def type_name(kind):
    """The manifest's name of a type: ``"3-gram"`` or ``"skip(r=1,s=*,a=2)"``."""
    if kind[0] == "ngram":
        return f"{kind[1]}-gram"
    return "skip(r={},s={},a={})".format(*kind[1:])


def parent_type(kind):
    """The type ``kind`` extends by one older word, or None."""
    if kind[0] == "ngram":
        return ("ngram", kind[1] - 1) if kind[1] >= 1 else None
    return ("skip", kind[1] - 1, kind[2], kind[3]) if kind[1] >= 2 else None


def event_features(context, shapes):
    """``F(e)`` of the event after ``context`` (``<S>`` first): ``{(type, words)}``."""
    j = len(context)
    found = set()
    for kind, r, s, a in shapes:
        if r + s + a > j:  # would reach past <S>
            continue
        remote = context[j - a - s - r:j - a - s]
        adjacent = context[j - a:]
        found.add((kind, tuple(remote) + tuple(adjacent)))
    return found


def sentence_events(words, bos=BOS, eos=EOS):
    """``(context, target)`` of every event of a sentence (its words, already mapped;
    ``bos`` and ``eos`` what stands for ``<S>`` and ``</S>`` among them)."""
    padded = [bos] + list(words) + [eos]
    return [(padded[:k], padded[k]) for k in range(1, len(padded))]


def read_sentences(path, stats):
    """``[(line number, words)]`` of the sentences of a text file, plain or gzip; adds the
    invalid and empty lines it skips to ``stats``."""
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = data.split(b"\n")
    if lines[-1] == b"":  # the end of the last line, not a line
        lines.pop()
    sentences = []
    for number, raw in enumerate(lines, 1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            line = None
        if line is None or "\0" in line:
            stats["invalid_lines"] += 1
        elif not line.split():
            stats["empty_lines"] += 1
        else:
            sentences.append((number, line.split()))
    return sentences


def map_words(words, vocabulary, stats):
    """A sentence's words as the model sees them (``<UNK>`` for what it does not know);
    adds the sentence, its tokens, markers and out-of-vocabulary words to ``stats``."""
    stats["sentences"] += 1
    stats["tokens"] += len(words)
    stats["marker_tokens"] += sum(w in (BOS, EOS) for w in words)
    stats["oov_tokens"] += sum(w not in vocabulary and w not in (BOS, EOS) for w in words)
    return [w if w in vocabulary else UNK for w in words]


def vocabulary_words(path):
    """The words of a vocabulary file, markers apart."""
    with open(path, encoding="utf-8") as f:
        return set(f.read().split("\n")) - {""} - set(MARKERS)


def text_stats():
    """Zero of every text total the count's manifest keeps."""
    return collections.Counter(dict.fromkeys(STATS, 0))


def brute_force_count(config_text, sources, vocabulary, min_feature_count=None,
                      min_link_count=None):
    """The count of ``sources`` (``[(tag, [path, ...]), ...]``) by the definitions above;
    ``vocabulary`` the set of words known (:func:`vocabulary_words`); ``min_feature_count``
    ``{type name: N}``: features of those types seen fewer than N times left out, and not
    counted as extensions either; ``min_link_count`` the same of links, a feature keeping
    its C(f,*) and counting its kept links as its diversity.

    Returns ``(features, links, totals)``: ``{identity: (C(f,*), diversity)}``,
    ``{(identity, word): (C(f,w), N1+(. f w))}`` and the count manifest's totals.
    """
    shapes = feature_shapes(config_text)
    stats = text_stats()
    link_counts = collections.Counter()
    for tag, paths in sources:
        for path in paths:
            for _, words in read_sentences(path, stats):
                mapped = map_words(words, vocabulary, stats)
                for context, target in sentence_events(mapped):
                    stats["events"] += 1
                    found = event_features(context, shapes)
                    stats["feature_occurrences"] += len(found)
                    for kind, feature_words in found:
                        link_counts[((tag, kind, feature_words), target)] += 1
    below = {}
    seen = collections.Counter()
    for (feature, _), count in link_counts.items():
        seen[feature] += count
    if min_feature_count or min_link_count:
        feature_min, link_min = min_feature_count or {}, min_link_count or {}
        kept = collections.Counter({
            (f, w): n for (f, w), n in link_counts.items()
            if seen[f] >= feature_min.get(type_name(f[1]), 1)
            and n >= link_min.get(type_name(f[1]), 1)})
        below = {"below_threshold_occurrences": sum(link_counts.values()) - sum(kept.values())}
        link_counts = kept
    continuations = collections.Counter()
    for ((tag, kind, feature_words), target) in link_counts:
        parent = parent_type(kind)
        if parent is not None:
            continuations[((tag, parent, feature_words[1:]), target)] += 1
    features = collections.defaultdict(lambda: [0, 0])
    links = {}
    for ((tag, kind, feature_words), target), count in link_counts.items():
        identity = (tag, type_name(kind), feature_words)
        links[(identity, target)] = (count, continuations[((tag, kind, feature_words), target)])
        features[identity][0] = seen[(tag, kind, feature_words)]
        features[identity][1] += 1
    totals = {**stats, "links": len(links), "features": len(features),
              "link_count_sum": sum(link_counts.values()), "key_collisions": 0, **below}
    return {f: tuple(v) for f, v in features.items()}, links, totals


def read_table(directory, prefix):
    """The rows of every ``prefix-*.parquet`` file of a directory, in file order."""
    paths = sorted(glob.glob(os.path.join(str(directory), f"{prefix}-*.parquet")))
    return pa.concat_tables(pq.read_table(path) for path in paths).to_pylist()


#: A model table's files: its rows (the count's) and the adjusted values beside them.
MODEL_FILES = {"matrix": ("links", "m"), "features": ("features", "m_star")}


def model_table(directory, table):
    """A model's ``"matrix"`` or ``"features"`` as one Arrow table: every bucket's rows file
    with its values file's column beside it, in file order."""
    rows_prefix, values_prefix = MODEL_FILES[table]
    rows, values = (sorted(glob.glob(os.path.join(str(directory), f"{prefix}-*.parquet")))
                    for prefix in (rows_prefix, values_prefix))
    assert [os.path.basename(p)[len(rows_prefix):] for p in rows] == \
        [os.path.basename(p)[len(values_prefix):] for p in values]
    parts = []
    for rows_path, values_path in zip(rows, values):
        part, value = pq.read_table(rows_path), pq.read_table(values_path)
        assert part.num_rows == value.num_rows, rows_path
        parts.append(part.append_column(values_prefix, value[values_prefix]))
    return pa.concat_tables(parts)


def read_model_table(directory, table):
    """The rows of a model's ``"matrix"`` or ``"features"`` (:func:`model_table`)."""
    return model_table(directory, table).to_pylist()


def feature_identities(directory, tags, feature_types):
    """``{key: (tag, type name, words)}`` of a count directory's features (its ``vocab.txt``
    gives the words of the ids); asserts that no two keys share an identity."""
    with open(os.path.join(str(directory), "vocab.txt"), encoding="utf-8") as f:
        words = f.read().split("\n")
    identities = {row["feature"]: (tags[row["tag"]], feature_types[row["type"]],
                                   tuple(words[i] for i in row["words"]))
                  for row in read_table(directory, "features")}
    assert len(set(identities.values())) == len(identities), "two keys of one feature"
    return identities, words


def read_count_directory(directory, manifest=None):
    """A count directory's files by feature identity (not by key), read with pyarrow.

    ``manifest`` (its ``tags`` and ``feature_types``): the directory's ``manifest.json``
    unless given.  Returns ``(features, links, totals)`` as :func:`brute_force_count` does
    (``totals`` None without a manifest file).
    """
    totals = None
    if manifest is None:
        with open(os.path.join(str(directory), "manifest.json"), encoding="utf-8") as f:
            manifest = json.load(f)
        totals = manifest["totals"]
    identity, words = feature_identities(directory, manifest["tags"], manifest["feature_types"])
    features = {identity[row["feature"]]: (row["count"], row["diversity"])
                for row in read_table(directory, "features")}
    links = {(identity[row["feature"]], words[row["word"]]): (row["count"], row["continuation"])
             for row in read_table(directory, "links")}
    return features, links, totals


def heldout_events(config_text, paths, vocabulary, tags):
    """The events of held-out text as the join reads them, by the definitions above:
    ``([(file index, line, target, features)], totals)``, ``features`` every feature of
    the event once per training tag (identities as :func:`brute_force_count`'s)."""
    shapes = feature_shapes(config_text)
    stats = text_stats()
    events = []
    for index, path in enumerate(paths):
        for line, words in read_sentences(path, stats):
            for context, target in sentence_events(map_words(words, vocabulary, stats)):
                found = {(tag, type_name(kind), feature_words) for tag in tags
                         for kind, feature_words in event_features(context, shapes)}
                stats["events"] += 1
                stats["feature_occurrences"] += len(found)
                events.append((index, line, target, found))
    return events, stats
