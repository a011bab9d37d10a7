"""The model card, ``model_card.md``: what a model is, what it was trained on, how good it is."""

from snm_core import __version__
from snm_core.io import storage, tables
from snm_core.scoring.layouts.hashed import COMPACT, READ_LAYOUTS


def write_model_card(model_dir, manifest, evaluation=None, keep_evaluation=False, name=None):
    """``model_card.md``: what the model is, what it was trained on, how good it is.

    ``evaluation`` maps a text's name to its ``{"adjusted": ..., "unadjusted": ...}`` report;
    with ``keep_evaluation`` the Evaluation section of the card there is kept instead.
    ``name`` (default: the directory's) heads the card.
    """
    card = storage.join(model_dir, "model_card.md")
    kept = ""
    if keep_evaluation and storage.isfile(card):
        text = storage.read_text(card)
        kept = text[text.index("\n## Evaluation"):] if "\n## Evaluation" in text else ""
    totals, fit = manifest.get("count_totals", {}), manifest.get("fit", {})
    spec, training = fit.get("metafeatures", {}), fit.get("training", {})
    tags = ", ".join(manifest["tags"]) if any(manifest["tags"]) else "none (pooled)"
    extras = "".join(f" + {name}" for name in ("diversity", "continuation") if spec.get(name))
    skipped = totals.get("empty_lines", 0) + totals.get("invalid_lines", 0)
    name = name or storage.basename(storage.absolute(model_dir))
    lines = [
        f"# SNM language model: {name}",
        "",
        "## Configuration",
        "```", manifest["config"].rstrip(), "```",
        f"- corpus tags: {tags}",
        f"- vocabulary: {manifest['vocabulary_size']:,} words (with <S>, </S>, <UNK>)",
        f"- meta-features: {spec.get('variant')}{extras}, hash size "
        f"{spec.get('hash_size', 0):,}, {fit.get('weights_in_use', 0):,} weights in use",
        f"- training: {training.get('epochs')} AdaGrad epoch(s), batch "
        f"{training.get('batch_size')}, gamma {training.get('gamma')}",
        f"- written by snm {__version__}",
        "",
        "## Data",
        f"- training: {totals.get('sentences', 0):,} sentences, {totals.get('tokens', 0):,} "
        f"words ({totals.get('oov_tokens', 0):,} out of vocabulary), {skipped:,} lines skipped",
        f"- model: {manifest['totals']['features']:,} features, "
        f"{manifest['totals']['links']:,} links",
        *_left_out(totals),
        *_selected(manifest.get("selection")),
        f"- held-out: {fit.get('heldout_events', 0):,} events; perplexity "
        f"{fit.get('heldout_perplexity_unadjusted', float('nan')):.2f} unadjusted, "
        f"{fit.get('heldout_perplexity', float('nan')):.2f} adjusted",
    ]
    pruning = manifest.get("pruning")
    if pruning:
        before = pruning["links_before"]
        lines += ["", "## Pruning",
                  f"- {manifest['totals']['links']:,} of {before:,} links kept "
                  f"({manifest['totals']['links'] / max(before, 1):.1%}), "
                  f"{manifest['totals']['features']:,} of {pruning['features_before']:,} "
                  "features",
                  f"- criterion: {pruning['criterion']}; target "
                  f"{pruning['target_links'] or '-'} links, score threshold "
                  f"{pruning['threshold']:.3g}",
                  f"- pruned from: {pruning['source']}"]
        if pruning.get("target_size"):
            rounds = pruning["size_rounds"]
            lines.append(f"- to a size: at most {pruning['target_size']:,} bytes of the scoring "
                         f"directory, {rounds[-1]['bytes']:,} after {len(rounds)} pruning(s)")
        if pruning.get("heldout") and pruning.get("discounts"):
            lines.append(f"- discounts chosen on the held-out text in {pruning['heldout']}")
        elif pruning.get("heldout"):
            lines.append(f"- the features of the held-out text in {pruning['heldout']} "
                         f"weighed {pruning['heldout_weight']:g} times more")
    scoring = manifest.get("scoring_only")
    if scoring:
        lines += ["", "## Scoring directory",
                  f"- the {scoring['layout']} layout's arrays, vocabulary and configuration "
                  f"only, written by 'snm compact --out' from {scoring['source']} (export-arpa, "
                  "prune and compact need that model's tables)"]
    compact = storage.join(model_dir, COMPACT, tables.MANIFEST)
    if storage.isfile(compact):
        stored = storage.read_json(compact)
        links = max(manifest["totals"]["links"], 1)
        lines += ["", "## Storage",
                  f"- compact/: {stored['bytes']:,} bytes, {stored['bytes'] / links:.1f} bytes "
                  "a link (memory-mapped for scoring)"]
        if stored.get("layout") in READ_LAYOUTS:
            lines.append(f"- layout hashed ({stored['layout']}): hashed keys, 8-byte entries (32 "
                         "key bits and a float32 M), float32 c(w|f) for the unadjusted model")
            if stored.get("link_collisions"):
                lines.append(f"- {stored['link_collisions']:,} links share their 64-bit link "
                             "keys: kept whole in link_collisions")
        elif str(stored.get("layout")).startswith("trie"):
            lines.append(f"- layout trie ({stored['layout']}): {stored['entries']:,} n-gram "
                         "entries by context, word ranks and float32 M; no unadjusted model")
        elif str(stored.get("layout")).startswith("small"):
            lines.append(f"- layout small ({stored['layout']}): {stored['entries']:,} n-gram "
                         "entries by context, Huffman-coded; M rounded to a log step of "
                         f"{stored['value_step']:.3g} (perplexity within 0.1%); no unadjusted "
                         "model")
    if evaluation:
        lines += ["", "## Evaluation", "",
                  "| model | text | perplexity | excluding OOV | OOV | words | sentences |",
                  "|---|---|---|---|---|---|---|"]
        for text, report in evaluation.items():
            for kind in ("adjusted", "unadjusted"):
                if kind not in report:  # the trie layouts keep no unadjusted model
                    continue
                r = report[kind]
                lines.append(f"| {kind} | {text} | {r['perplexity']:.2f} | "
                             f"{r['perplexity_excluding_oov']:.2f} | {r['oov']:,} | "
                             f"{r['words']:,} | {r['sentences']:,} |")
    storage.write_text("\n".join(lines) + "\n" + kept, card)  # kept: "\n## Evaluation..."


def _selected(selection):
    """The Data section's line on the size the counts were selected for, if they were
    (``snm select``: ``snm train --prune_to`` of a skip-gram model)."""
    if not selection:
        return []
    target = (f"{selection['target_size']:,} bytes ({selection['layout']})"
              if selection.get("target_size") else f"{selection['target_links']:,} links")
    share = (f" and {selection['partial']['share']:.0%} of the step below it"
             if selection.get("partial") else "")
    return [f"- fitted at a size (snm train --prune_to, snm select): counts selected for at "
            f"most {target}, link thresholds of level {selection['level']}{share}, from "
            f"{selection['links_before']:,} links"]


def _left_out(totals):
    """The Data section's line on what the count's thresholds left out, if they did."""
    left_out = totals.get("below_threshold_occurrences")
    if not left_out:
        return []
    share = left_out / max(totals["feature_occurrences"], 1)
    return [f"- left out below the count thresholds (--min_feature_count, --min_link_count, "
            f"or those --prune_to chose): the links of {left_out:,} feature occurrences "
            f"({share:.1%})"]
