"""Feature-extraction configuration: the text format of the paper's Appendices A and B.

A configuration is a list of extractor blocks::

    // Sample config generating a straight 5-gram language model.
    ngram_extractor {
      min_n: 0
      max_n: 4
    }
    skip_ngram_extractor { max_context_words: 4 min_remote_words: 1
                           max_remote_words: 1 min_skip_length: 1
                           max_skip_length: 10 tie_skip_length: true }

``//`` and ``#`` start a comment that runs to the end of the line.  Fields may
share a line.  Every error names the line and says what is wrong.

Fields of ``ngram_extractor`` (contexts of n words right before the target):

=============  =======  ==================================================
field          default  meaning
=============  =======  ==================================================
min_n          0        shortest context; 0 is the empty (unigram) feature
max_n          required longest context
=============  =======  ==================================================

Fields of ``skip_ngram_extractor``, feature ``(r, s, a)``: ``a`` adjacent words
right before the target, then ``s`` skipped words, then ``r`` remote words:

==================  ====================  ==========================================
field               default               meaning
==================  ====================  ==========================================
max_context_words   required              upper bound on r + a
min_context_words   1                     lower bound on r + a
min_remote_words    1                     lower bound on r (>= 1: with no remote
                                          word the feature is an n-gram)
max_remote_words    max_context_words     upper bound on r
min_adjacent_words  0                     lower bound on a
max_adjacent_words  max_context_words - 1 upper bound on a
min_skip_length     1                     lower bound on s (>= 1)
max_skip_length     required              upper bound on s
tie_skip_length     false                 true: s is left out of the feature's
                                          identity (``[w skip-* x]``)
==================  ====================  ==========================================

The blocks compile to a list of :class:`FeatureType` (feature identities
without words, e.g. ``3-gram`` or ``skip(r=1,s=*,a=2)``) and of generators
``(type_index, r, s, a)``: one per concrete window shape.  A tied type has one
generator per skip length; an n-gram of length n is the generator
``(type, 0, 0, n)``.
"""

import dataclasses
import importlib.resources
import os
import re

from snm_core.io.errors import SnmInputError

#: Longest context (r + s + a) any extractor may look at.  Far beyond any useful
#: model; it bounds the work per event and catches typos such as ``max_n: 400``.
MAX_SPAN = 64

PRESETS = ("5gram", "skip10gram", "skip5gram")


class ConfigError(SnmInputError):
    """A configuration that cannot be used; the message names the place and the fix."""


@dataclasses.dataclass(frozen=True, order=True)
class FeatureType:
    """A feature identity without its words.

    ``kind`` is ``"ngram"`` (then ``remote = skip = 0`` and ``adjacent = n``) or
    ``"skip"``; ``skip`` is ``None`` for a tied skip length.
    """

    kind: str
    remote: int
    skip: object  # int, or None when tied
    adjacent: int

    @property
    def name(self):
        """``"3-gram"``, ``"0-gram"`` (the empty feature), ``"skip(r=1,s=*,a=2)"``."""
        if self.kind == "ngram":
            return f"{self.adjacent}-gram"
        s = "*" if self.skip is None else self.skip
        return f"skip(r={self.remote},s={s},a={self.adjacent})"

    @property
    def num_words(self):
        """Words in the feature's identity: n, or r + a."""
        return self.remote + self.adjacent

    def sort_key(self):
        tied = self.skip is None
        return (self.kind != "ngram", self.remote, self.adjacent, tied, self.skip or 0)


@dataclasses.dataclass(frozen=True)
class NgramExtractor:
    min_n: int = 0
    max_n: int = None
    line: int = 0

    def windows(self):
        """Yield ``(type, r, s, a)`` for every window this block extracts."""
        for n in range(self.min_n, self.max_n + 1):
            yield FeatureType("ngram", 0, 0, n), 0, 0, n


@dataclasses.dataclass(frozen=True)
class SkipNgramExtractor:
    max_context_words: int = None
    min_context_words: int = 1
    min_remote_words: int = 1
    max_remote_words: int = None
    min_adjacent_words: int = 0
    max_adjacent_words: int = None
    min_skip_length: int = 1
    max_skip_length: int = None
    tie_skip_length: bool = False
    line: int = 0

    def windows(self):
        for r in range(self.min_remote_words, self.max_remote_words + 1):
            for a in range(self.min_adjacent_words, self.max_adjacent_words + 1):
                if not self.min_context_words <= r + a <= self.max_context_words:
                    continue
                for s in range(self.min_skip_length, self.max_skip_length + 1):
                    skip = None if self.tie_skip_length else s
                    yield FeatureType("skip", r, skip, a), r, s, a


_FIELDS = {
    "ngram_extractor": {"min_n": int, "max_n": int},
    "skip_ngram_extractor": {
        "max_context_words": int,
        "min_context_words": int,
        "min_remote_words": int,
        "max_remote_words": int,
        "min_adjacent_words": int,
        "max_adjacent_words": int,
        "min_skip_length": int,
        "max_skip_length": int,
        "tie_skip_length": bool,
    },
}
_REQUIRED = {
    "ngram_extractor": ("max_n",),
    "skip_ngram_extractor": ("max_context_words", "max_skip_length"),
}
_TOKEN = re.compile(r"\s*(?:(?P<comment>//|#)|(?P<word>[A-Za-z_][A-Za-z0-9_]*)|"
                    r"(?P<number>-?[0-9]+)|(?P<punct>[{}:])|(?P<other>\S+))")


@dataclasses.dataclass(frozen=True)
class ExtractionConfig:
    """A parsed configuration: the extractor blocks and where they came from.

    Build one with :func:`parse_config`, :func:`load_config` or :func:`preset`.
    """

    extractors: tuple
    source: str = "<string>"

    def feature_types(self):
        """Distinct feature types of all blocks, in a fixed order (n-grams by n first)."""
        types = {t for block in self.extractors for t, _, _, _ in block.windows()}
        return tuple(sorted(types, key=FeatureType.sort_key))

    def generators(self):
        """Distinct windows ``(type_index, r, s, a)``, sorted.

        Several generators share a type only when the skip length is tied, and
        only then can one event yield the same feature twice.
        """
        index = {t: i for i, t in enumerate(self.feature_types())}
        windows = {(index[t], r, s, a) for block in self.extractors
                   for t, r, s, a in block.windows()}
        return tuple(sorted(windows))

    @property
    def max_span(self):
        """Longest context any window reads: max of r + s + a."""
        return max(r + s + a for _, r, s, a in self.generators())

    @property
    def is_ngram_only(self):
        return all(isinstance(b, NgramExtractor) for b in self.extractors)

    @property
    def ngram_order(self):
        """For a back-off-compatible n-gram config (lengths 0..N, no skips): N + 1.

        Returns None for any other configuration.
        """
        lengths = {t.adjacent for t in self.feature_types() if t.kind == "ngram"}
        if self.is_ngram_only and lengths == set(range(max(lengths) + 1)):
            return max(lengths) + 1
        return None

    def to_text(self):
        """Canonical text of this configuration; parsing it gives the same config."""
        out = []
        for block in self.extractors:
            kind = ("ngram_extractor" if isinstance(block, NgramExtractor)
                    else "skip_ngram_extractor")
            out.append(kind + " {")
            for name in _FIELDS[kind]:
                value = getattr(block, name)
                text = str(value).lower() if isinstance(value, bool) else str(value)
                out.append(f"  {name}: {text}")
            out.append("}")
        return "\n".join(out) + "\n"


def _tokens(text, source):
    for lineno, line in enumerate(text.splitlines(), start=1):
        pos = 0
        while True:
            m = _TOKEN.match(line, pos)
            if m is None or m.group("comment"):
                break
            pos = m.end()
            for kind in ("word", "number", "punct", "other"):
                if m.group(kind) is not None:
                    yield kind, m.group(kind), lineno


def parse_config(text, source="<string>"):
    """Parse the configuration format; see the module docstring.

    Parameters
    ----------
    text : str
    source : str
        Name used in error messages (a file name or preset name).

    Returns
    -------
    ExtractionConfig

    Raises
    ------
    ConfigError
        Naming ``source``, the line and what to change.

    Examples
    --------
    >>> cfg = parse_config("ngram_extractor { min_n: 0 max_n: 2 }")
    >>> [t.name for t in cfg.feature_types()]
    ['0-gram', '1-gram', '2-gram']
    """
    def fail(lineno, message):
        raise ConfigError(f"{source}, line {lineno}: {message}")

    tokens = list(_tokens(text, source))
    last_line = max(1, len(text.splitlines()))
    blocks = []
    i = 0

    def expect(punct):
        nonlocal i
        if i >= len(tokens):
            fail(last_line, f"unexpected end of file, expected {punct!r}")
        _, value, lineno = tokens[i]
        if value != punct:
            fail(lineno, f"expected {punct!r}, found {value!r}")
        i += 1

    while i < len(tokens):
        kind, name, lineno = tokens[i]
        if kind != "word" or name not in _FIELDS:
            fail(lineno, f"unknown block {name!r}; expected one of "
                         f"{', '.join(sorted(_FIELDS))}")
        i += 1
        expect("{")
        fields, field_lines = {}, {}
        block_line = lineno
        while True:
            if i >= len(tokens):
                fail(last_line,
                     f"block {name!r} opened on line {block_line} is not closed; add '}}'")
            kind, field, flineno = tokens[i]
            if kind == "punct" and field == "}":
                i += 1
                break
            if kind != "word":
                fail(flineno, f"expected a field name or '}}' in {name!r}, found {field!r}")
            if field not in _FIELDS[name]:
                fail(flineno, f"unknown field {field!r} in {name!r}; known fields: "
                              f"{', '.join(_FIELDS[name])}")
            if field in fields:
                fail(flineno, f"field {field!r} given twice (first on line {field_lines[field]})")
            i += 1
            expect(":")
            if i >= len(tokens):
                fail(last_line, f"missing value for {field!r}")
            vkind, value, vline = tokens[i]
            i += 1
            if _FIELDS[name][field] is bool:
                if value not in ("true", "false"):
                    fail(vline, f"{field} must be true or false, found {value!r}")
                fields[field] = value == "true"
            else:
                if vkind != "number":
                    fail(vline, f"{field} must be a whole number, found {value!r}")
                fields[field] = int(value)
            field_lines[field] = vline
        blocks.append(_make_block(name, fields, field_lines, block_line, fail))
    if not blocks:
        fail(last_line, "no extractor block; add e.g. 'ngram_extractor { min_n: 0 max_n: 4 }'")
    config = ExtractionConfig(tuple(blocks), source)
    if config.max_span > MAX_SPAN:
        fail(max(b.line for b in blocks),
             f"a window reaches {config.max_span} words back; the limit is {MAX_SPAN}")
    return config


def _make_block(name, fields, field_lines, block_line, fail):
    for field in _REQUIRED[name]:
        if field not in fields:
            fail(block_line, f"{name!r} needs field {field!r}")

    def line_of(*names):
        return max((field_lines.get(n, block_line) for n in names), default=block_line)

    for field, value in fields.items():
        if not isinstance(value, bool) and value < 0:
            fail(field_lines[field], f"{field} must not be negative, found {value}")

    if name == "ngram_extractor":
        block = NgramExtractor(line=block_line, **fields)
        if block.min_n > block.max_n:
            fail(line_of("min_n", "max_n"),
                 f"min_n ({block.min_n}) is greater than max_n ({block.max_n})")
        return block

    max_ctx = fields["max_context_words"]
    fields.setdefault("max_remote_words", max_ctx)
    fields.setdefault("max_adjacent_words", max(0, max_ctx - 1))
    block = SkipNgramExtractor(line=block_line, **fields)
    if block.min_remote_words < 1:
        fail(line_of("min_remote_words"),
             "min_remote_words must be at least 1: a skip-gram without remote words "
             "is an n-gram; use ngram_extractor for those")
    if block.min_skip_length < 1:
        fail(line_of("min_skip_length"),
             "min_skip_length must be at least 1: with nothing skipped the feature "
             "is an n-gram; use ngram_extractor for those")
    for low, high in (("min_context_words", "max_context_words"),
                      ("min_remote_words", "max_remote_words"),
                      ("min_adjacent_words", "max_adjacent_words"),
                      ("min_skip_length", "max_skip_length")):
        if getattr(block, low) > getattr(block, high):
            fail(line_of(low, high),
                 f"{low} ({getattr(block, low)}) is greater than {high} ({getattr(block, high)})")
    if next(block.windows(), None) is None:
        fail(block_line, "these bounds admit no skip-gram: no (remote, adjacent) pair has "
                         "min_context_words <= remote + adjacent <= max_context_words; "
                         "widen max_context_words or the remote/adjacent bounds")
    return block


def ngram_config(order):
    """The configuration of a plain n-gram model of ``order`` N (KenLM's ``-o N``): the
    n-grams of 0 to N - 1 words before the target (``5gram`` is order 5).

    >>> ngram_config(3).ngram_order
    3
    """
    if not isinstance(order, int) or not 1 <= order <= MAX_SPAN + 1:
        raise ConfigError(f"--order must be between 1 and {MAX_SPAN + 1}, got {order}")
    return parse_config(f"ngram_extractor {{\n  min_n: 0\n  max_n: {order - 1}\n}}\n",
                        source=f"--order {order}")


def load_config(path_or_preset):
    """Load a preset by name (``5gram``, ``skip10gram``, ``skip5gram``; ``Ngram`` for any
    order N, as :func:`ngram_config`) or a config file.

    Raises
    ------
    ConfigError
        If the file does not exist or does not parse.
    """
    if path_or_preset in PRESETS:
        return preset(path_or_preset)
    order = re.fullmatch(r"([0-9]+)gram", path_or_preset)
    if order and not os.path.isfile(path_or_preset):
        return ngram_config(int(order.group(1)))
    if not os.path.isfile(path_or_preset):
        raise ConfigError(f"{path_or_preset}: no such configuration file and not a preset "
                          f"(presets: {', '.join(PRESETS)})")
    with open(path_or_preset, encoding="utf-8") as f:
        return parse_config(f.read(), source=path_or_preset)


def preset(name):
    """The shipped configuration ``name`` (one of :data:`PRESETS`)."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    text = importlib.resources.files("snm_core.text.presets").joinpath(f"{name}.cfg").read_text("utf-8")
    return parse_config(text, source=f"preset {name}")
