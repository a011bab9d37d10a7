"""What every ``snm prune`` criterion ends with: the pruned model's manifest, checked
against what was read, then its scoring arrays, model card and summary."""

from pipelines import running
from snm_core.io import losscheck, storage, tables
from snm_core.prune import criteria as prune_lib
from snm_core.scoring.card import write_model_card
from snm_core.scoring.compact import compile_model


def write_manifest(totals, out, manifest, pruning):
    """Checks what was read against the source's totals, then writes the manifest."""
    with losscheck.Checks("prune") as checks:
        checks.each_once("buckets", range(manifest["num_buckets"]),
                         [t["bucket"] for t in totals])
        for name in ("links", "features"):
            checks.equal(f"{name} in the model", manifest["totals"][name], f"{name} read",
                         sum(t[f"{name}_read"] for t in totals))
    return prune_lib.finish_output(out, manifest, sum(t["links"] for t in totals),
                                   sum(t["features"] for t in totals), pruning)


def finish(options, manifest, metrics, summary=True):
    """compact/, the model card and the summary of a pruned model whose manifest is
    written."""
    pruned = storage.read_json(storage.join(options.out, tables.MANIFEST))
    compile_model(options.out, options.layout, memory=options.memory)
    write_model_card(options.out, pruned)
    before, after = manifest["totals"], pruned["totals"]
    if summary:
        running.print_summary(f"snm prune: {after['links']:,} of {before['links']:,} links "
                              f"({after['links'] / max(before['links'], 1):.1%}), "
                              f"{after['features']:,} of {before['features']:,} features -> "
                              f"{options.out}", after, metrics)
    return pruned
