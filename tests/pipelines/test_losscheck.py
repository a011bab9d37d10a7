"""The loss checks of the stages' last steps: totals that do not add up stop the stage."""

import pytest

from pipelines import apply as apply_stage
from pipelines import count as count_stage
from pipelines import join as join_stage
from snm_core.io.errors import SnmStageError
from snm_core.stages import manifests


def test_count_totals_must_add_up():
    shards = ["0:a:0/2", "0:a:1/2"]
    good = {"shards": list(shards), "tokens": 10, "sentences": 2, "events": 12,
            "feature_occurrences": 40, "link_count_sum": 40}
    count_stage.check_counts(good, shards)
    for broken, message in (({"shards": shards[:1]}, "1 of 2 text shards never reported"),
                            ({"shards": shards + shards[:1]}, "reported twice"),
                            ({"shards": shards[:1] + ["0:b:0/2"]},
                             "1 of 2 text shards never reported \\(0:a:1/2\\); 1 of 2 text "
                             "shards not asked for \\(0:b:0/2\\); the runner lost"),
                            # a shard's statistics lost, its links written: both said
                            ({"shards": shards[:1], "feature_occurrences": 30},
                             "never reported \\(0:a:1/2\\); feature occurrences extracted = "
                             "30 but the sum of the link counts written = 40; the runner"),
                            ({"link_count_sum": 39}, "feature occurrences extracted = 40 but "
                                                     "the sum of the link counts written = 39"),
                            ({"events": 11}, "events extracted = 11")):
        with pytest.raises(SnmStageError, match=message):
            count_stage.check_counts({**good, **broken}, shards)
    # --add_to: the old count's occurrences are in the links written too
    count_stage.check_counts({**good, "link_count_sum": 45}, shards,
                             previous=manifests.Count(totals={"feature_occurrences": 5}))


def test_join_and_apply_totals_must_add_up():
    stats = {"shards": ["0:d:0/1"], "buckets": [0, 1], "tokens": 7, "sentences": 1,
             "events": 8, "event_rows": 8}
    join_stage.check_join(stats, ["0:d:0/1"], 2)
    with pytest.raises(SnmStageError, match="join: 1 of 2 buckets never reported"):
        join_stage.check_join({**stats, "buckets": [1]}, ["0:d:0/1"], 2)
    with pytest.raises(SnmStageError, match="held-out events written = 7"):
        join_stage.check_join({**stats, "event_rows": 7}, ["0:d:0/1"], 2)
    counts = manifests.Count(num_buckets=2, totals={"links": 5, "features": 3})
    totals = [{"bucket": 0, "links": 2, "features": 1}, {"bucket": 1, "links": 3, "features": 2}]
    apply_stage.check_apply(totals, counts)
    with pytest.raises(SnmStageError, match="apply: links counted = 5 but links applied = 2"):
        apply_stage.check_apply(totals[:1] + [{"bucket": 1, "links": 0, "features": 2}], counts)
    with pytest.raises(SnmStageError, match="never reported"):
        apply_stage.check_apply(totals[:1], counts)
