"""Language models inside a decoder: CTC beam search and n-best rescoring on simulated
acoustics, KenLM's KN5 beside our 5-gram and skip-10-gram SNMs; and the rate of
``score_words`` (the state API's batched path) beside kenlm's ``BaseScore`` loop.

    LMPLZ=$KENLM_BIN/lmplz python benchmarks/decoding.py
    LMPLZ=... python benchmarks/decoding.py --test 300 --dev 80 --sections ctc,rescore,states

Acoustics: kernel's test (and, for tuning, dev) sentences of ASCII text and at
most ``--max_words`` words, spelled one character a frame with a blank frame after
each.  A character's frame has logits N(0, 1) over every label plus ``PEAK`` on
the character; with probability ``CONFUSION`` a confusable character (its group in
``GROUPS``: vowels, voiced/voiceless pairs, digits, ...; else any letter) gets
``PEAK`` + N(``CONFUSER_SHIFT``, 1) too, and wins when its draw is higher.  Spaces are
not confused.  One seed (``--seed``) fixes everything.

flashlight (``--sections flashlight``): its ``LexiconDecoder`` (beam ``--beam_width``)
over the same labels, ``" "`` the word boundary, with a lexicon of the words of
kernel's vocab.txt spelled in them (a word outside it cannot be output), its trie
smeared with each model's unigram scores: no language model (``ZeroLM``), KenLM's
own flashlight ``KenLM`` on the KN5 as a ``build_binary trie`` file, a Python LM
that hands each call to that ``KenLM`` (KN5's search and words: its extra seconds
are the calls into Python alone), and the SNMs (hashed layout, and ``--models``)
through ``snm.decoding.FlashlightLM``, its C++ LM; ``lm_weight`` and ``word_score``
chosen on dev (a grid), the test decoded as for pyctcdecode.

Decoders: pyctcdecode's ``BeamSearchDecoderCTC`` (beam ``--beam_width``) with no
language model, with KenLM's KN5 (``lmplz -o 5 -S 1G`` on kernel's training text
with words outside vocab.txt as one placeholder word, its ARPA through the
``kenlm`` module and pyctcdecode's own wrapper, unigrams from the ARPA), and with
the SNMs through ``snm.decoding.PyctcdecodeLM`` (the 5-gram as a trie-layout
scoring directory, ``snm compact --layout trie --out``; the skip-10-gram in the
hashed layout).  Alpha and beta are chosen per model on the dev sentences (a
grid), then the test sentences are decoded by every decoder in turn, one
utterance at a time in rotating order, each decoder's seconds summed.  KN5 reads
a word outside vocab.txt as the placeholder that stood for such words in its
training text, as an SNM reads it as ``<UNK>``.  Rescoring: the no-LM decoder's
beams (width ``--nbest``), each hypothesis scored by each model (KenLM ``score``
per hypothesis; SNM ``score_lines`` in batches, as ``snm rescore``), plus
pyctcdecode's unknown-word offset for each word outside the vocabulary, weight and
word penalty chosen on dev (``snm rescore``'s formula); seconds are the scoring's,
the models taking turns ``--repeats`` times (best kept).

State scoring: every test sentence walked word by word through the SNM 5-gram's
state API in lockstep (one ``score_words`` call per position, all sentences'
states in one ``StateBatch``), against kenlm's ``BaseScore`` loop over the same
sentences on the same model (the SNM's ARPA export), taking turns.

Models are trained when missing, as README.md does (``snm train --config 5gram``
and ``skip10gram`` on kernel, under benchmarks/work/decoding/).  Prints tables and
appends to benchmarks/results.jsonl.
"""

import argparse
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import WORK, corpus, print_table, record  # noqa: E402
from benchmarks.common import OOV_PLACEHOLDER  # noqa: E402
from benchmarks.count import unk_text  # noqa: E402

HERE = os.path.join(WORK, "decoding")
PEAK = 6.0
CONFUSION = 0.25
CONFUSER_SHIFT = -0.3
GROUPS = ["aeiou", "bp", "dt", "gkc", "mn", "sz", "fv", "lr", "wy", "hj", "qx",
          "AEIOU", "BP", "DT", "GKC", "MN", "SZ", "FV", "LR", "WY", "HJ", "QX",
          "0123456789", "([{", ")]}", ".,;:", "-_=", "'\"`", "/\\|"]
ALPHAS = (0.3, 0.5, 0.8, 1.2)
BETAS = (0.0, 1.0, 2.5)
#: flashlight's lm_weight (on log10 probabilities, as its KenLM gives) and word_score.
FLASHLIGHT_ALPHAS = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
FLASHLIGHT_BETAS = (-3.0, -2.0, -1.0, 0.0, 1.0)
LM_WEIGHTS = (0.1, 0.2, 0.35, 0.5, 0.8)
WORD_PENALTIES = (-1.0, 1.0, 2.5, 4.0, 6.0)
#: pyctcdecode's log10 offset for a word outside the vocabulary.
UNK_OFFSET = -10.0


# --- models -----------------------------------------------------------------------------------

def snm(*args):
    subprocess.run([sys.executable, "-m", "snm", *args], check=True,
                   cwd=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def ensure_models(lmplz):
    """Paths of the KenLM ARPA, the 5-gram scoring directory (trie), the skip-10-gram
    model, and the 5-gram SNM's ARPA export; each made once."""
    kernel = os.path.dirname(corpus("kernel", "train.txt.gz"))
    models = {}
    for config in ("5gram", "skip10gram"):
        run = os.path.join(HERE, f"kernel-{config}")
        if not os.path.isfile(os.path.join(run, "model", "manifest.json")):
            snm("train", "--config", config, "--train", f"{kernel}/train.txt.gz",
                "--vocab", f"{kernel}/vocab.txt", "--heldout", f"{kernel}/dev.txt",
                "--test", f"{kernel}/test.txt", "--out", run, "--direct_num_workers=2")
        models[config] = os.path.join(run, "model")
    trie = os.path.join(HERE, "kernel-5gram-trie")
    if not os.path.isfile(os.path.join(trie, "manifest.json")):
        snm("compact", "--model", models["5gram"], "--layout", "trie", "--out", trie)
    snm_arpa = os.path.join(HERE, "kernel-5gram-snm.arpa")
    if not os.path.isfile(snm_arpa):
        snm("export-arpa", "--model", models["5gram"], "--out", snm_arpa)
    kn5 = os.path.join(HERE, "kernel-kn5.arpa")
    if not os.path.isfile(kn5):
        if not lmplz:
            raise SystemExit("set LMPLZ to KenLM's lmplz (benchmarks/README.md: the build)")
        subprocess.run([lmplz, "-o", "5", "-S", "1G", "--text", unk_text("kernel"),
                        "--arpa", kn5 + ".tmp"], check=True, stderr=subprocess.DEVNULL)
        os.replace(kn5 + ".tmp", kn5)
    kn5_binary = os.path.join(HERE, "kernel-kn5.trie")
    if not os.path.isfile(kn5_binary) and lmplz:  # build_binary beside lmplz
        build_binary = os.path.join(os.path.dirname(lmplz), "build_binary")
        subprocess.run([build_binary, "trie", kn5, kn5_binary + ".tmp"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.replace(kn5_binary + ".tmp", kn5_binary)
    return {"kn5": kn5, "kn5_binary": kn5_binary, "snm5": trie, "skip10": models["skip10gram"],
            "snm5_arpa": snm_arpa, "snm5_hashed": models["5gram"]}


# --- simulated acoustics ----------------------------------------------------------------------

def sentences(name, n, max_words):
    with open(corpus("kernel", name), encoding="utf-8") as f:
        lines = [" ".join(line.split()) for line in f]
    keep = [s for s in lines if s and s.isascii() and len(s.split()) <= max_words]
    return keep[:n]


def labels_of(texts):
    return [""] + sorted({c for t in texts for c in t} | {" "})


def log_probs(text, labels, rng):
    """(frames, labels) log-softmax of a character frame and a blank frame per character."""
    index = {c: i for i, c in enumerate(labels)}
    letters = [c for c in labels if c.isalpha()]
    group = {c: g for g in GROUPS for c in g}
    frames = rng.normal(0.0, 1.0, size=(2 * len(text), len(labels)))
    for k, char in enumerate(text):
        frames[2 * k, index[char]] += PEAK
        frames[2 * k + 1, 0] += PEAK
        if char != " " and rng.random() < CONFUSION:
            options = [c for c in group.get(char, "") if c != char and c in index] or \
                [c for c in letters if c != char]
            other = options[rng.integers(len(options))]
            frames[2 * k, index[other]] += PEAK + rng.normal(CONFUSER_SHIFT, 1.0) \
                - frames[2 * k, index[other]]
    frames -= frames.max(axis=1, keepdims=True)
    return frames - np.log(np.exp(frames).sum(axis=1, keepdims=True))


def word_errors(reference, hypothesis):
    """Word-level Levenshtein distance."""
    ref, hyp = reference.split(), hypothesis.split()
    row = np.arange(len(hyp) + 1)
    for i, r in enumerate(ref, 1):
        previous, row = row, np.empty_like(row)
        row[0] = i
        for j, h in enumerate(hyp, 1):
            row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (r != h))
    return int(row[-1])


def wer(references, hypotheses):
    errors = sum(word_errors(r, h) for r, h in zip(references, hypotheses))
    return errors / sum(len(r.split()) for r in references)


# --- CTC beam search --------------------------------------------------------------------------

def kenlm_language_model(arpa):
    """pyctcdecode's KenLM wrapper, with a word outside vocab.txt read as the placeholder
    that stood for all of them in lmplz's text (so KN5 gives it their probability, as an
    SNM gives such a word <UNK>'s); pyctcdecode's unknown-word offset still applies."""
    import kenlm
    from pyctcdecode.language_model import LanguageModel, load_unigram_set_from_arpa

    class PlaceholderLM(LanguageModel):
        def score(self, prev_state, word, is_last_word=False):  # the offset: the placeholder
            return super().score(prev_state, word if word in self._unigram_set  # is no unigram
                                 else OOV_PLACEHOLDER, is_last_word)

    unigrams = load_unigram_set_from_arpa(arpa) - {OOV_PLACEHOLDER}
    return PlaceholderLM(kenlm.Model(arpa), unigrams)


def decoders(paths, labels, extra=()):
    import pyctcdecode

    import snm as api
    from snm.decoding import PyctcdecodeLM
    alphabet = pyctcdecode.Alphabet.build_alphabet(labels)
    kn5 = kenlm_language_model(paths["kn5"])
    return {"none": pyctcdecode.BeamSearchDecoderCTC(alphabet),
            "kenlm_kn5": pyctcdecode.BeamSearchDecoderCTC(alphabet, kn5),
            "snm_5gram": pyctcdecode.BeamSearchDecoderCTC(
                alphabet, PyctcdecodeLM(api.load(paths["snm5"]))),
            "snm_skip10gram": pyctcdecode.BeamSearchDecoderCTC(
                alphabet, PyctcdecodeLM(api.load(paths["skip10"]))),
            **{f"snm_{os.path.basename(os.path.normpath(model))}":
               pyctcdecode.BeamSearchDecoderCTC(alphabet, PyctcdecodeLM(api.load(model)))
               for model in extra}}


def decode_all(decoder, utterances, beam_width):
    return [decoder.decode(lp, beam_width=beam_width) for lp in utterances]


def tune(decoder, dev, references, beam_width, alphas=ALPHAS, betas=BETAS):
    """(alpha, beta, dev WER) with the lowest dev WER on the grid."""
    best = None
    for alpha in alphas:
        for beta in betas:
            decoder.reset_params(alpha=alpha, beta=beta)
            score = wer(references, decode_all(decoder, dev, beam_width))
            if best is None or score < best[2]:
                best = (alpha, beta, score)
    decoder.reset_params(alpha=best[0], beta=best[1])
    return best


def ctc_section(paths, labels, dev, test, dev_text, test_text, args):
    found = decoders(paths, labels, args.models)
    tuned = {"none": (None, None, wer(dev_text, decode_all(found["none"], dev,
                                                           args.beam_width)))}
    for name, decoder in found.items():
        if name != "none":
            tuned[name] = tune(decoder, dev, dev_text, args.beam_width)
            print(f"tuned {name}: alpha {tuned[name][0]} beta {tuned[name][1]} "
                  f"dev WER {tuned[name][2]:.4f}", flush=True)
    return timed_rows("ctc", found, tuned, test, test_text, args)


def timed_rows(section, found, tuned, test, test_text, args):
    """The test utterances decoded by every decoder in turn (rotating who goes first),
    each decoder's seconds summed; a row a decoder, ratios to KenLM's KN5."""
    rows = []
    names = list(found)
    seconds = dict.fromkeys(names, 0.0)
    output = {name: [] for name in names}
    for i, utterance in enumerate(test):
        for name in names[i % len(names):] + names[:i % len(names)]:
            start = time.perf_counter()
            output[name].append(found[name].decode(utterance, beam_width=args.beam_width))
            seconds[name] += time.perf_counter() - start
    for name in names:
        alpha, beta, dev_wer = tuned[name]
        rows.append({"section": section, "lm": name, "alpha": alpha, "beta": beta,
                     "dev_wer": round(dev_wer, 4), "wer": round(wer(test_text, output[name]), 4),
                     "seconds": round(seconds[name], 2), "utterances": len(test),
                     "beam_width": args.beam_width})
    base = {r["lm"]: r for r in rows}
    for r in rows:
        r["wer_vs_kn5"] = round(r["wer"] / base["kenlm_kn5"]["wer"], 3)
        r["seconds_vs_kn5"] = round(r["seconds"] / base["kenlm_kn5"]["seconds"], 3)
    return rows


# --- flashlight's lexicon decoder ------------------------------------------------------------

class FlashlightDecoder:
    """flashlight's ``LexiconDecoder`` over the labels (``" "`` the word boundary) with a
    lexicon of kernel's vocabulary (the words spelled in the labels) and one language
    model, its trie smeared with that model's unigram scores (as torchaudio does)."""

    def __init__(self, lm, words, labels, beam_width):
        from flashlight.lib.text.decoder import SmearingMode, Trie
        self.lm, self.words, self.labels, self.beam_width = lm, words, labels, beam_width
        self.trie = Trie(len(labels), labels.index(" "))
        start = lm.start(False)
        for i, word in enumerate(words[:-1]):  # the last is <unk>
            self.trie.insert([labels.index(c) for c in word], i, lm.score(start, i)[1])
        self.trie.smear(SmearingMode.MAX)
        self.reset_params(alpha=1.0, beta=0.0)

    def reset_params(self, alpha, beta):
        from flashlight.lib.text.decoder import (CriterionType, LexiconDecoder,
                                                 LexiconDecoderOptions)
        options = LexiconDecoderOptions(
            beam_size=self.beam_width, beam_size_token=len(self.labels), beam_threshold=25.0,
            lm_weight=alpha, word_score=beta, unk_score=float("-inf"), sil_score=0.0,
            log_add=False, criterion_type=CriterionType.CTC)
        self.decoder = LexiconDecoder(options, self.trie, self.lm, self.labels.index(" "),
                                      self.labels.index(""), len(self.words) - 1, [], False)

    def decode(self, log_probs, beam_width=None):
        emissions = np.ascontiguousarray(log_probs, dtype=np.float32)
        best = self.decoder.decode(emissions.ctypes.data, *emissions.shape)[0]
        return " ".join(self.words[i] for i in best.words if i >= 0)


def python_lm_floor(inner):
    """A flashlight LM in Python that hands every call to ``inner`` (KenLM's flashlight
    LM): the same search and words as KenLM's, so its seconds less KenLM's are what the
    calls from C++ into Python cost, the least any LM written in Python adds."""
    from flashlight.lib.text.decoder import LM

    class Floor(LM):
        def __init__(self):
            LM.__init__(self)

        def start(self, start_with_nothing):
            return inner.start(start_with_nothing)

        def score(self, state, usr_token_idx):
            return inner.score(state, usr_token_idx)

        def finish(self, state):
            return inner.finish(state)

    return Floor()


def flashlight_decoders(paths, labels, beam_width, extra=()):
    """No LM (flashlight's ZeroLM), KenLM's flashlight LM on the KN5 trie binary, and the
    SNMs through ``snm.decoding.FlashlightLM``, each with the same lexicon."""
    from flashlight.lib.text.decoder import ZeroLM
    from flashlight.lib.text.decoder.kenlm import KenLM
    from flashlight.lib.text.dictionary import Dictionary

    import snm as api
    from snm.decoding import FlashlightLM
    spelled = set(labels) - {"", " "}
    with open(corpus("kernel", "vocab.txt"), encoding="utf-8") as f:
        words = [w for w in (line.strip() for line in f)
                 if w and w not in ("<S>", "</S>", "<UNK>") and set(w) <= spelled]
    words.append("<unk>")
    dictionary = Dictionary()
    for word in words:
        dictionary.add_entry(word)
    kn5 = KenLM(paths["kn5_binary"], dictionary)
    lms = {"none": ZeroLM(), "kenlm_kn5": kn5, "python_lm_floor": python_lm_floor(kn5),
           "snm_5gram": FlashlightLM(api.load(paths["snm5_hashed"]), words),
           "snm_skip10gram": FlashlightLM(api.load(paths["skip10"]), words),
           **{f"snm_{os.path.basename(os.path.normpath(model))}":
              FlashlightLM(api.load(model), words) for model in extra}}
    assert all(FlashlightLM.compiled(lms[name]) for name in lms if name.startswith("snm_"))
    return {name: FlashlightDecoder(lm, words, labels, beam_width) for name, lm in lms.items()}


def flashlight_section(paths, labels, dev, test, dev_text, test_text, args):
    found = flashlight_decoders(paths, labels, args.beam_width, args.models)
    tuned = {}
    for name, decoder in found.items():
        # Without a model only word_score counts: it is all that keeps a lexicon decoder
        # from spelling a word as several short ones.
        if name == "python_lm_floor":  # its seconds matter, not its words
            decoder.reset_params(*tuned["kenlm_kn5"][:2])
            tuned[name] = tuned["kenlm_kn5"]
            continue
        tuned[name] = tune(decoder, dev, dev_text, args.beam_width,
                           FLASHLIGHT_ALPHAS if name != "none" else (0.0,), FLASHLIGHT_BETAS)
        print(f"tuned flashlight {name}: lm_weight {tuned[name][0]} word_score "
              f"{tuned[name][1]} dev WER {tuned[name][2]:.4f}", flush=True)
    return timed_rows("flashlight", found, tuned, test, test_text, args)


# --- n-best rescoring -------------------------------------------------------------------------

def nbest_lists(decoder, utterances, args):
    """Per utterance: (hypotheses, their no-LM scores), distinct texts, best first."""
    lists = []
    for lp in utterances:
        seen, texts, scores = set(), [], []
        for text, _, _, logit_score, _ in decoder.decode_beams(lp, beam_width=args.nbest):
            text = " ".join(text.split())
            if text not in seen:
                seen.add(text)
                texts.append(text)
                scores.append(logit_score)
        lists.append((texts, np.array(scores)))
    return lists


def lm_scorers(paths):
    """name -> function(list of texts) -> natural-log probabilities (</S> included)."""
    import kenlm

    import snm as api
    from snm.commands.rescore import lm_log_probs
    kn5 = kenlm.Model(paths["kn5"])
    vocab = set(open(corpus("kernel", "vocab.txt"), encoding="utf-8").read().split())
    ln10 = np.log(10.0)
    models = {"snm_5gram": api.load(paths["snm5"]), "snm_skip10gram": api.load(paths["skip10"])}

    def kenlm_scores(texts):  # words outside vocab.txt as lmplz's placeholder, as in training
        return np.array([kn5.score(" ".join(w if w in vocab else OOV_PLACEHOLDER
                                            for w in t.split()), bos=True, eos=True) * ln10
                         for t in texts])

    scorers = {"kenlm_kn5": kenlm_scores}
    for name, model in models.items():
        scorers[name] = (lambda m: lambda texts: lm_log_probs(m, texts))(model)
    return scorers


def rescored(lists, lm, weight, penalty):
    """The best hypothesis of each list."""
    from snm.commands.rescore import rescore
    best, at = [], 0
    for texts, scores in lists:
        order, _, _ = rescore(["u"] * len(texts), scores, texts, lm[at:at + len(texts)],
                              weight, penalty)
        best.append(texts[order[0]])
        at += len(texts)
    return best


def rescore_section(decoder, dev, test, dev_text, test_text, paths, args):
    dev_lists, test_lists = nbest_lists(decoder, dev, args), nbest_lists(decoder, test, args)
    flat = {part: [t for texts, _ in lists for t in texts]
            for part, lists in (("dev", dev_lists), ("test", test_lists))}
    # pyctcdecode's unknown-word offset, as in the fused decoders: without it a model's
    # <UNK> class cannot tell a misspelling from a real word it does not know.
    vocab = set(open(corpus("kernel", "vocab.txt"), encoding="utf-8").read().split())
    unknown = {part: UNK_OFFSET * np.log(10.0) * np.array(
        [sum(w not in vocab for w in t.split()) for t in flat[part]]) for part in flat}
    scorers = lm_scorers(paths)
    seconds, lm = {}, {}
    for _ in range(args.repeats):
        for name, score in scorers.items():
            start = time.perf_counter()
            lm[name, "test"] = score(flat["test"])
            elapsed = time.perf_counter() - start
            seconds[name] = min(seconds.get(name, elapsed), elapsed)
            lm[name, "test"] += unknown["test"]
    rows = [{"section": "rescore", "lm": "none", "wer": round(wer(test_text, [
        texts[0] for texts, _ in test_lists]), 4), "hypotheses": len(flat["test"])},
        {"section": "rescore", "lm": "oracle", "wer": round(sum(
            min(word_errors(r, t) for t in texts) for r, (texts, _) in zip(test_text, test_lists))
            / sum(len(r.split()) for r in test_text), 4), "hypotheses": len(flat["test"])}]
    for name, score in scorers.items():
        dev_lm = score(flat["dev"]) + unknown["dev"]
        weight, penalty = min(((w, p) for w in LM_WEIGHTS for p in WORD_PENALTIES),
                              key=lambda wp: wer(dev_text, rescored(dev_lists, dev_lm, *wp)))
        rows.append({"section": "rescore", "lm": name, "lm_weight": weight,
                     "word_penalty": penalty, "dev_wer": round(wer(dev_text, rescored(
                         dev_lists, dev_lm, weight, penalty)), 4),
                     "wer": round(wer(test_text, rescored(test_lists, lm[name, "test"], weight,
                                                          penalty)), 4),
                     "seconds": round(seconds[name], 3), "hypotheses": len(flat["test"])})
    kn5 = next(r for r in rows if r["lm"] == "kenlm_kn5")
    for r in rows:
        if "seconds" in r:
            r["seconds_vs_kn5"] = round(r["seconds"] / kn5["seconds"], 3)
        r["wer_vs_kn5"] = round(r["wer"] / kn5["wer"], 3)
    return rows


# --- the state API's batched path against kenlm's BaseScore loop ------------------------------

def states_section(paths, args):
    import kenlm

    import snm as api
    from snm.api import StateBatch
    with open(corpus("kernel", "test.txt"), encoding="utf-8") as f:
        # Longest first, so that the sentences still going at a position are a prefix.
        lines = sorted((line.split() for line in f if line.split()), key=len, reverse=True)
    words = sum(len(s) + 1 for s in lines)
    lm = kenlm.Model(paths["snm5_arpa"])
    rows = []
    for layout, path in (("trie", paths["snm5"]),
                         ("hashed", os.path.join(HERE, "kernel-5gram", "model"))):
        model = api.load(path)
        ids = np.full((len(lines), len(lines[0]) + 1), -1, np.int32)
        for i, s in enumerate(lines):
            ids[i, :len(s)] = model.sentence_ids(" ".join(s))
            ids[i, len(s)] = 1  # </S>
        going = [int(np.sum(np.array([len(s) for s in lines]) >= t))
                 for t in range(ids.shape[1])]  # sentences scoring position t

        def snm_pass():
            states = StateBatch.of([model.begin_state()] * len(lines), model.state_width)
            total = 0.0
            for t, n in enumerate(going):
                log10, states = model.score_words(states.take(np.arange(n)), ids[:n, t])
                total += log10.sum()
            return total

        def kenlm_pass():
            total = 0.0
            for s in lines:
                state, out = kenlm.State(), kenlm.State()
                lm.BeginSentenceWrite(state)
                for w in s:
                    total += lm.BaseScore(state, w, out)
                    state, out = out, state
                total += lm.BaseScore(state, "</s>", out)
            return total

        best = {}
        for _ in range(args.repeats):
            for name, run in (("kenlm", kenlm_pass), ("snm", snm_pass)):
                start = time.perf_counter()
                total = run()
                elapsed = time.perf_counter() - start
                best[name] = (min(best.get(name, (elapsed,))[0], elapsed), total)
        rows.append({"section": "states", "layout": layout, "words": words,
                     "snm_words_per_s": round(words / best["snm"][0]),
                     "kenlm_words_per_s": round(words / best["kenlm"][0]),
                     "rate_vs_kenlm": round(best["kenlm"][0] / best["snm"][0], 3),
                     "log10_snm": round(best["snm"][1], 2),
                     "log10_kenlm": round(best["kenlm"][1], 2)})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--test", type=int, default=300, help="test utterances")
    parser.add_argument("--dev", type=int, default=80, help="dev utterances (tuning)")
    parser.add_argument("--max_words", type=int, default=30)
    parser.add_argument("--beam_width", type=int, default=20)
    parser.add_argument("--nbest", type=int, default=64,
                        help="beam width of the no-LM decoder whose beams are rescored")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sections", default="ctc,flashlight,rescore,states")
    parser.add_argument("--models", nargs="*", default=[],
                        help="more SNM model or scoring directories for the ctc and flashlight sections, "
                             "named by their directory (e.g. a packed skip-10-gram)")
    parser.add_argument("--dry_run", action="store_true", help="do not append to results.jsonl")
    args = parser.parse_args(argv)
    sections = args.sections.split(",")
    paths = ensure_models(os.environ.get("LMPLZ"))
    rng = np.random.default_rng(args.seed)
    dev_text = sentences("dev.txt", args.dev, args.max_words)
    test_text = sentences("test.txt", args.test, args.max_words)
    rows = []
    labels = labels_of(dev_text + test_text)
    dev = [log_probs(t, labels, rng) for t in dev_text]
    test = [log_probs(t, labels, rng) for t in test_text]
    if "ctc" in sections:
        ctc_rows = ctc_section(paths, labels, dev, test, dev_text, test_text, args)
        print_table(ctc_rows, ["lm", "alpha", "beta", "dev_wer", "wer", "wer_vs_kn5",
                               "seconds", "seconds_vs_kn5"])
        rows += ctc_rows
    if "flashlight" in sections:
        flashlight_rows = flashlight_section(paths, labels, dev, test, dev_text, test_text,
                                             args)
        print_table(flashlight_rows, ["lm", "alpha", "beta", "dev_wer", "wer", "wer_vs_kn5",
                                      "seconds", "seconds_vs_kn5"])
        rows += flashlight_rows
    if "rescore" in sections:
        import pyctcdecode
        plain = pyctcdecode.BeamSearchDecoderCTC(pyctcdecode.Alphabet.build_alphabet(labels))
        rescore_rows = rescore_section(plain, dev, test, dev_text, test_text, paths, args)
        print_table(rescore_rows, ["lm", "lm_weight", "word_penalty", "dev_wer", "wer",
                                   "wer_vs_kn5", "seconds", "seconds_vs_kn5", "hypotheses"])
        rows += rescore_rows
    if "states" in sections:
        state_rows = states_section(paths, args)
        print_table(state_rows, ["layout", "words", "snm_words_per_s", "kenlm_words_per_s",
                                 "rate_vs_kenlm", "log10_snm", "log10_kenlm"])
        rows += state_rows
    if not args.dry_run:
        record("decoding", [{**r, "seed": args.seed} for r in rows])


if __name__ == "__main__":
    main()
