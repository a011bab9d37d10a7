import pytest

from snm_core.text.config import (
    PRESETS,
    ConfigError,
    FeatureType,
    load_config,
    parse_config,
    preset,
)


def test_presets_parse_and_match_the_appendices():
    five = preset("5gram")
    assert [t.name for t in five.feature_types()] == [f"{n}-gram" for n in range(5)]
    assert five.ngram_order == 5
    skip10 = preset("skip10gram")
    names = {t.name for t in skip10.feature_types()}
    assert {f"{n}-gram" for n in range(10)} <= names
    # Block 1: one remote word, tied skip 1..10, up to 3 adjacent words.
    assert {f"skip(r=1,s=*,a={a})" for a in range(4)} <= names
    # Block 2: untied skip of 1, r + a <= 5.
    assert "skip(r=1,s=1,a=4)" in names and "skip(r=5,s=1,a=0)" in names
    assert "skip(r=2,s=*,a=0)" not in names and "skip(r=1,s=2,a=0)" not in names
    assert skip10.max_span == 1 + 10 + 3
    assert skip10.ngram_order is None
    for name in PRESETS:
        assert load_config(name) == preset(name)


def test_appendix_a_text_parses_with_comments_and_one_line_blocks():
    text = """// Sample config generating a straight 5-gram language model.
    ngram_extractor {
      min_n: 0   # trailing comment
      max_n: 4
    }
    ngram_extractor { min_n: 2 max_n: 3 }"""
    cfg = parse_config(text)
    assert len(cfg.extractors) == 2
    assert [t.name for t in cfg.feature_types()] == [f"{n}-gram" for n in range(5)]
    assert parse_config(cfg.to_text()).feature_types() == cfg.feature_types()


def test_tied_skip_has_one_type_and_one_generator_per_skip_length():
    cfg = parse_config("skip_ngram_extractor { max_context_words: 2 min_remote_words: 1 "
                       "max_remote_words: 1 min_skip_length: 2 max_skip_length: 4 "
                       "tie_skip_length: true }")
    assert [t.name for t in cfg.feature_types()] == ["skip(r=1,s=*,a=0)", "skip(r=1,s=*,a=1)"]
    assert sorted((r, s, a) for _, r, s, a in cfg.generators()) == sorted(
        (1, s, a) for a in (0, 1) for s in (2, 3, 4))
    assert FeatureType("skip", 1, None, 1).num_words == 2


@pytest.mark.parametrize("text, message", [
    ("ngram_extractor {\n  min_n: 0\n  max_m: 4\n}", r"line 3: unknown field 'max_m'"),
    ("ngram_extractor {\n  min_n: 3\n  max_n: 2\n}", r"line 3: min_n \(3\) is greater than max_n"),
    ("ngram_extractor {\n  min_n: 0\n",
     r"line 2: block 'ngram_extractor' opened on line 1 is not closed"),
    ("ngram_extracter { max_n: 2 }", r"line 1: unknown block 'ngram_extracter'"),
    ("ngram_extractor {\n max_n: four }", r"line 2: max_n must be a whole number, found 'four'"),
    ("ngram_extractor { max_n: 2\n max_n: 3 }",
     r"line 2: field 'max_n' given twice \(first on line 1\)"),
    ("ngram_extractor { min_n: 1 }", r"line 1: 'ngram_extractor' needs field 'max_n'"),
    ("ngram_extractor { max_n: -1 }", r"line 1: max_n must not be negative"),
    ("ngram_extractor { max_n 2 }", r"line 1: expected ':', found '2'"),
    ("// nothing here\n", r"no extractor block"),
    ("skip_ngram_extractor {\n max_context_words: 3\n max_skip_length: 2\n min_remote_words: 0 }",
     r"line 4: min_remote_words must be at least 1"),
    ("skip_ngram_extractor { max_context_words: 3 max_skip_length: 2\n min_skip_length: 0 }",
     r"line 2: min_skip_length must be at least 1"),
    ("skip_ngram_extractor { max_context_words: 2 max_skip_length: 2\n tie_skip_length: yes }",
     r"line 2: tie_skip_length must be true or false"),
    ("skip_ngram_extractor {\n max_context_words: 2 max_skip_length: 2\n min_remote_words: 3 }",
     r"line 3: min_remote_words \(3\) is greater than max_remote_words \(2\)"),
    ("skip_ngram_extractor { max_context_words: 2 max_skip_length: 2 min_adjacent_words: 2\n"
     " max_adjacent_words: 2 }", r"line 1: these bounds admit no skip-gram"),
    ("ngram_extractor { max_n: 100 }", r"reaches 100 words back; the limit is 64"),
])
def test_config_errors_name_the_line_and_the_problem(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(text, source="my.cfg")


def test_error_names_the_file(tmp_path):
    path = tmp_path / "bad.cfg"
    path.write_text("ngram_extractor { max_n: 2 }\nfoo {}\n")
    with pytest.raises(ConfigError, match=r"bad.cfg, line 2: unknown block 'foo'"):
        load_config(str(path))
    with pytest.raises(ConfigError, match="no such configuration file and not a preset"):
        load_config(str(tmp_path / "missing.cfg"))
