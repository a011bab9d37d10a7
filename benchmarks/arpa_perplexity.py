"""Corpus perplexity of an ARPA back-off model (KenLM's lmplz output), ``</s>`` included.

KenLM's ``query`` and its Python module are built for orders up to 6 here; this reads the
ARPA text instead, for the kernel-100k KN figures above order 6 (``reference.md`` has no
order 11). Words outside the vocabulary must already be mapped to one ordinary word, as
``reference.md`` does for lmplz. It reproduces ``reference.md``'s 97.53 (order 5, also
KenLM's Python module), 97.40 (10) and 97.39 (12).

    python benchmarks/arpa_perplexity.py MODEL.arpa TEST.txt
"""
import sys


def load(path):
    """(log10 probability, log10 back-off) by n-gram tuple, and the model's order."""
    prob, backoff, order = {}, {}, 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("ngram "):
                order = max(order, int(line.split()[1].split("=")[0]))
            if line.startswith("\\1-grams:"):
                break
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 2:  # a section header, blank line or \end\
                continue
            ngram = tuple(fields[1].split())
            prob[ngram] = float(fields[0])
            if len(fields) > 2:
                backoff[ngram] = float(fields[2])
    return prob, backoff, order


def log10_probability(prob, backoff, context, word):
    """The ARPA back-off rule: the longest n-gram present, plus the back-offs of the
    longer contexts it skipped."""
    total = 0.0
    while context + (word,) not in prob:
        total += backoff.get(context, 0.0)
        context = context[1:]
    return total + prob[context + (word,)]


def main(argv=None):
    model_path, test_path = (argv or sys.argv[1:])[:2]
    prob, backoff, order = load(model_path)
    total, tokens = 0.0, 0
    with open(test_path, encoding="utf-8") as f:
        for line in f:
            words = ["<s>"] + line.split() + ["</s>"]
            for i in range(1, len(words)):
                context = tuple(words[max(0, i - order + 1):i])
                total += log10_probability(prob, backoff, context, words[i])
                tokens += 1
    print(f"order {order}: {tokens} tokens, perplexity {10 ** (-total / tokens):.4f}")


if __name__ == "__main__":
    main()
