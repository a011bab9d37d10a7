"""``snm prune --criterion reestimate``: an n-gram model estimated again from its counts
and pruned as pocolm prunes (:mod:`snm_core.prune.reestimate`), in this process.

The n-gram table is held whole (the budget says so before anything is read); the
discounts are chosen on ``--heldout`` (a join directory on the model's counts) when
given: first for the unpruned model, then, from there, for the pruned one, a pruning a
trial.  The pruned model is written in the source's buckets with its links' M_hw
replaced, so everything that reads a pruned model reads it."""

import numpy as np
import pyarrow as pa

from pipelines.prune_output import finish
from pipelines.runners import usable_cpus
from snm_core.arpa.backoff import plain_extractor
from snm_core.fit.heldout import read_events
from snm_core.io import memory, model_files
from snm_core.io.errors import SnmInputError
from snm_core.io.progress import LOGGER
from snm_core.prune import criteria as prune_lib
from snm_core.prune import reestimate
from snm_core.text.config import parse_config


def search_workers(spare, links):
    """Processes for the search on the pruned model: the usable CPUs, as many as the
    ``spare`` bytes of the budget hold beyond the first (each adds a pruning's arrays)."""
    return max(1, min(usable_cpus(), 1 + spare // max(links * reestimate.BYTES_PER_LINK_A_TRIAL,
                                                      1)))


def prune_reestimate(options, manifest, check_heldout, summary=True):
    """Prune ``options.model`` into ``options.out`` (see the module docstring); returns
    the pruned manifest."""
    if parse_config(manifest["config"]).ngram_order is None:
        raise SnmInputError("--criterion reestimate needs an n-gram configuration; prune "
                            "skip-gram models with mass or count")
    if len(manifest.get("tags") or [""]) > 1:
        raise SnmInputError("--criterion reestimate needs a pooled model (one corpus tag); "
                            "prune a tagged model with backoff")
    if options.target_links is None:
        raise SnmInputError("--criterion reestimate prunes to --target_links or "
                            "--target_size, not to a --threshold")
    links = int(manifest["totals"]["links"])
    held = {"the process": memory.PROCESS_BYTES,
            "the n-gram table": links * reestimate.BYTES_PER_LINK}
    options.memory.require("prune", held)
    say = LOGGER.info
    table = reestimate.read_table(options.model, manifest["num_buckets"],
                                  plain_extractor(manifest["config"]).keys_for)
    discounts = reestimate.default_discounts(table.order)
    heldout_perplexity = pruned_perplexity = None
    if options.heldout:
        check_heldout(options.heldout, manifest)
        events = read_events(options.heldout)
        events = reestimate.heldout_events(table, events.ptr, events.keys, events.target)
        discounts, heldout_perplexity = reestimate.tune_discounts(table, events, say)
        discounts, pruned, pruned_perplexity = reestimate.tune_pruned_discounts(
            table, events, discounts, options.target_links, say,
            workers=search_workers(options.memory.left(held), links))
    else:
        pruned = reestimate.prune(
            table, reestimate.discounted(table, discounts), options.target_links,
            progress=lambda number, kept, threshold: say(
                f"prune: pass {number}: {kept:,} links (threshold {threshold:.3g})"))
    m, _ = reestimate.snm_values(table, pruned)
    new_m = np.zeros(table.num_links, np.float32)
    kept = np.zeros(table.num_links, bool)
    for n in range(1, table.order + 1):
        new_m[table.link_rows[n]] = m[n]
        kept[table.link_rows[n]] = pruned.c[n] > 0
    prune_lib.start_output(options.model, options.out)
    start, total_links, total_features = 0, 0, 0
    num_buckets = manifest["num_buckets"]
    for bucket in range(num_buckets):
        features, matrix = (model_files.read_bucket(options.model, t, bucket, num_buckets)
                            for t in ("features", "matrix"))
        rows = slice(start, start + matrix.num_rows)
        start += matrix.num_rows
        matrix = matrix.set_column(matrix.schema.get_field_index("m"), "m",
                                   pa.array(new_m[rows]))
        features, matrix = prune_lib.pruned_tables(features, matrix, kept[rows])
        prune_lib.write_bucket(options.out, bucket, num_buckets, features, matrix)
        total_links += matrix.num_rows
        total_features += features.num_rows
    if start != links:
        raise SnmInputError(f"{options.model}: {start:,} links read where its manifest says "
                            f"{links:,}")
    pruning = {"criterion": "re-estimated from the counts with count moving, pruned by "
                            "relative entropy with E-M between passes "
                            "(snm_core/prune/reestimate.py)",
               "suffix_closed": True, "target_links": options.target_links,
               "threshold": pruned.threshold,
               "discounts": {str(n): list(d) for n, d in discounts.items()},
               "heldout": options.heldout, "heldout_perplexity_unpruned": heldout_perplexity,
               "heldout_perplexity": pruned_perplexity,
               "links_before": links, "features_before": manifest["totals"]["features"],
               "source": options.model}
    prune_lib.finish_output(options.out, manifest, total_links, total_features, pruning)
    return finish(options, manifest, None, summary)
