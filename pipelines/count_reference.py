"""``snm count --reference``: the count with one Beam element per feature occurrence.

The slow, plain form of the count: every (feature, word) occurrence is an
element, summed by ``CombinePerKey(sum)``; each feature's identity is one of
its occurrences'.  Its output is the partials the fast path's bucket merge
takes (:class:`pipelines.count_links.CountLinks` wires it in place of
``ExtractLinkPartials``), so the files it writes are the fast path's.  It
shares the tokenizer, the extraction and the merge with the fast path; the
tests check both against the paper's definitions (``tests/support/paper.py``).
"""

import apache_beam as beam
import numpy as np

from pipelines import reading
from snm_core.count import counting
from snm_core.io import key_ranges, losscheck
from snm_core.text.tokenize import tokenize


def _reference_pairs(shard, settings, batch_bytes, encoding):
    """Yield one ("link", ((key, word), 1)) and one ("feature", ...) element per occurrence."""
    vocab, extractor = settings.build()
    stats = {"shards": [shard.name]}
    for batch in reading.ShardReader(batch_bytes, encoding).batches(shard, stats):
        sentences, _, sentence_stats = tokenize(batch.lines, vocab)
        events = extractor.extract(sentences, tags=[batch.source])
        words = events.context_words()
        targets = events.target[events.event]
        for p in range(events.num_pairs):
            key = int(events.key[p])
            yield "link", ((key, int(targets[p])), 1)
            yield "feature", (key, (int(events.type[p]), tuple(int(w) for w in words[p])))
        losscheck.add_totals(stats, {**vars(sentence_stats), "events": events.num_events,
                                     "feature_occurrences": events.num_pairs})
    yield "stats", stats


def _reference_part(element, num_buckets, num_type_ids):
    """All links of one feature and its identity -> ``(bucket, ("part", part))``."""
    key, values = element
    words, counts, identity = [], [], None
    for kind, value in values:
        if kind == "link":
            words.append(value[0])
            counts.append(value[1])
        else:
            identity = value
    keys = np.full(len(words), key, dtype=np.uint64)
    part = counting.scratch_groups(
        {"feature": keys, "word": np.array(words, np.int32), "count": np.array(counts, np.int64)},
        {"feature": keys[:1], "type": np.array([identity[0]], np.int32),
         "words": np.array([identity[1]], np.int32)}, num_type_ids=num_type_ids)
    return int(key_ranges.bucket_of(keys[:1], num_buckets)[0]), ("part", part)


class ReferenceLinkPartials(beam.PTransform):
    """The slow, plain count: ``CombinePerKey(sum)`` over single occurrences."""

    def __init__(self, settings, num_buckets, batch_bytes, encoding="utf-8"):
        super().__init__()
        self.settings = settings
        self.num_buckets = num_buckets
        self.batch_bytes = batch_bytes
        self.encoding = encoding

    def expand(self, shards):
        tagged = shards | "Occurrences" >> beam.FlatMap(_reference_pairs, self.settings,
                                                        self.batch_bytes, self.encoding)
        links = (tagged
                 | "Links" >> beam.Filter(lambda kv: kv[0] == "link") | "LinkKV" >> beam.Values()
                 | "SumLinks" >> beam.CombinePerKey(sum)
                 | "ByFeature" >> beam.Map(lambda kv: (kv[0][0], ("link", (kv[0][1], kv[1])))))
        features = (tagged
                    | "Features" >> beam.Filter(lambda kv: kv[0] == "feature")
                    | "FeatureKV" >> beam.Values()
                    | "OneIdentity" >> beam.CombinePerKey(min)
                    | "Identity" >> beam.Map(lambda kv: (kv[0], ("feature", kv[1]))))
        parts = ((links, features)
                 | "LinksAndFeatures" >> beam.Flatten()
                 | "GroupByFeature" >> beam.GroupByKey()
                 | "Parts" >> beam.Map(_reference_part, self.num_buckets,
                                      self.settings.extractor().num_type_ids))
        stats = (tagged
                 | "Stats" >> beam.Filter(lambda kv: kv[0] == "stats")
                 | "StatsKV" >> beam.Map(lambda kv: (0, ("stats", kv[1]))))
        return (parts, stats) | "AllPartials" >> beam.Flatten()
