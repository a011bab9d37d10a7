from snm_core.text import synthetic


def test_generator_is_deterministic_and_seeded():
    assert synthetic.generate(50, seed=3) == synthetic.generate(50, seed=3)
    assert synthetic.generate(50, seed=3) != synthetic.generate(50, seed=4)


def test_long_distance_pairs_are_beyond_a_5gram():
    sentences = [s.split() for s in synthetic.generate(2000, seed=0)]
    paired = [s for s in sentences if s[0].startswith("begin")]
    assert len(paired) > 500
    for words in paired:
        k = words[0][len("begin"):]
        assert words[-1] == "end" + k
        assert len(words) - 2 >= synthetic.MIN_GAP  # words strictly between the pair
    assert not any(w.startswith("end") for s in sentences if not s[0].startswith("begin")
                   for w in s)
