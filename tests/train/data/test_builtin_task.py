"""The built-in English -> German number task: hand-checked translations, agreement, splits."""

import pytest

from train.data.builtin_task import (COLOUR_ADJECTIVES, LOCATIONS, NOUNS, SIZE_ADJECTIVES, Scene,
                         english_number, german_number, make_number_task, render, write_task)

NOUN = {n.en: n for n in NOUNS}
ADJ = {a.en: a for a in SIZE_ADJECTIVES + COLOUR_ADJECTIVES}
LOC = {loc.en: loc for loc in LOCATIONS}

# Hand-checked against German grammar references (units before tens; hundert, not einhundert).
NUMBERS = [
    (1, "one", "eins"),
    (7, "seven", "sieben"),
    (11, "eleven", "elf"),
    (12, "twelve", "zwölf"),
    (16, "sixteen", "sechzehn"),
    (17, "seventeen", "siebzehn"),
    (20, "twenty", "zwanzig"),
    (21, "twenty-one", "einundzwanzig"),
    (30, "thirty", "dreißig"),
    (35, "thirty-five", "fünfunddreißig"),
    (66, "sixty-six", "sechsundsechzig"),
    (71, "seventy-one", "einundsiebzig"),
    (77, "seventy-seven", "siebenundsiebzig"),
    (100, "one hundred", "hundert"),
    (101, "one hundred one", "hunderteins"),
    (110, "one hundred ten", "hundertzehn"),
    (116, "one hundred sixteen", "hundertsechzehn"),
    (200, "two hundred", "zweihundert"),
    (321, "three hundred twenty-one", "dreihunderteinundzwanzig"),
    (517, "five hundred seventeen", "fünfhundertsiebzehn"),
    (630, "six hundred thirty", "sechshundertdreißig"),
    (701, "seven hundred one", "siebenhunderteins"),
    (999, "nine hundred ninety-nine", "neunhundertneunundneunzig"),
]


@pytest.mark.parametrize("n, en, de", NUMBERS)
def test_number_words_match_table(n, en, de):
    assert english_number(n) == en
    assert german_number(n) == de


def test_number_words_structure_for_all_numbers():
    # Independent of the table: 'und' iff two-digit tail >= 21 and not a round ten;
    # 'eins' only as the final unit; words are distinct (a bijection on 1..999).
    seen = set()
    for n in range(1, 1000):
        de, tail = german_number(n), n % 100
        after_hundred = de.split("hundert")[-1]  # 'hundert' itself contains 'und'
        assert ("und" in after_hundred) == (tail >= 21 and tail % 10 != 0), (n, de)
        assert ("eins" in de) == (tail == 1), (n, de)
        assert " " not in de and de == de.lower()
        assert de.startswith("hundert") == (100 <= n < 200)
        seen.add(de)
    assert len(seen) == 999
    assert len({english_number(n) for n in range(1, 1000)}) == 999


@pytest.mark.parametrize("n", [0, 1000, -5])
def test_number_words_reject_out_of_range(n):
    with pytest.raises(ValueError):
        german_number(n)
    with pytest.raises(ValueError):
        english_number(n)


def scene(count, noun, adjectives, location, order="subject"):
    return Scene(count, NOUN[noun], tuple(ADJ[a] for a in adjectives), LOC[location], order)


@pytest.mark.parametrize("args, en, de", [
    ((1, "apple", ["red"], "on the table"),
     "one red apple is on the table", "ein roter Apfel liegt auf dem Tisch"),
    ((1, "pear", ["red"], "in the box"),
     "one red pear is in the box", "eine rote Birne liegt in der Kiste"),
    ((1, "book", ["red"], "under the chair"),
     "one red book is under the chair", "ein rotes Buch liegt unter dem Stuhl"),
    ((1, "glass", ["big", "white"], "in the cupboard"),
     "one big white glass is in the cupboard", "ein großes weißes Glas steht im Schrank"),
    ((1, "bottle", [], "next to the bed"),
     "one bottle is next to the bed", "eine Flasche steht neben dem Bett"),
    ((3, "apple", ["red"], "on the table"),
     "three red apples are on the table", "drei rote Äpfel liegen auf dem Tisch"),
    ((321, "apple", ["red"], "on the table"),
     "three hundred twenty-one red apples are on the table",
     "dreihunderteinundzwanzig rote Äpfel liegen auf dem Tisch"),
    ((21, "knife", ["old"], "behind the door"),
     "twenty-one old knives are behind the door",
     "einundzwanzig alte Messer liegen hinter der Tür"),
    ((101, "mug", [], "on the bench"),
     "one hundred one mugs are on the bench", "hunderteins Becher stehen auf der Bank"),
])
def test_agreement_subject_first(args, en, de):
    assert render(scene(*args)) == (en, de)


def test_word_order_location_first_is_verb_second():
    assert render(scene(3, "apple", [], "on the table", "location")) == (
        "on the table there are three apples", "auf dem Tisch liegen drei Äpfel")
    assert render(scene(1, "lamp", ["small"], "behind the sofa", "location")) == (
        "behind the sofa there is one small lamp", "hinter dem Sofa steht eine kleine Lampe")


def test_there_order_and_no():
    assert render(scene(0, "book", ["old"], "under the chair", "there")) == (
        "there are no old books under the chair", "es liegen keine alten Bücher unter dem Stuhl")
    assert render(scene(0, "cup", ["small", "blue"], "in the basket", "location")) == (
        "in the basket there are no small blue cups", "im Korb stehen keine kleinen blauen Tassen")
    assert render(scene(1, "egg", [], "on the shelf", "there")) == (
        "there is one egg on the shelf", "es liegt ein Ei auf dem Regal")


def test_unknown_order_raises():
    with pytest.raises(ValueError, match="order"):
        render(scene(2, "egg", [], "on the shelf", "sideways"))


def test_task_is_deterministic_and_seed_dependent():
    a = make_number_task(seed=5, n_train=300, n_valid=20, n_test=20)
    b = make_number_task(seed=5, n_train=300, n_valid=20, n_test=20)
    c = make_number_task(seed=6, n_train=300, n_valid=20, n_test=20)
    assert a == b
    assert a["train"] != c["train"]


def test_default_task_splits_sizes_no_overlap_and_lengths():
    task = make_number_task()
    assert {k: len(v) for k, v in task.items()} == {"train": 20_000, "valid": 500, "test": 500}
    sources = [set(en for en, _ in task[s]) for s in ("train", "valid", "test")]
    assert sum(map(len, sources)) == 21_000  # unique inside each split, disjoint across
    assert len(sources[0] | sources[1] | sources[2]) == 21_000
    lengths = [len(en.split()) for pairs in task.values() for en, _ in pairs]
    assert 5 <= min(lengths) and max(lengths) <= 12
    german = " ".join(de for _, de in task["train"])
    for word in ("ein", "eine", "keine", "liegt", "steht", "liegen", "stehen", "im"):
        assert f" {word} " in f" {german} ", word  # every construction is actually sampled


def test_write_task_writes_line_aligned_files(tmp_path):
    paths = write_task(tmp_path, seed=1, n_train=50, n_valid=5, n_test=5)
    task = make_number_task(seed=1, n_train=50, n_valid=5, n_test=5)
    assert set(paths) == {"train", "valid", "test"}
    for split, (en_path, de_path) in paths.items():
        assert en_path.name == f"{split}.en" and de_path.name == f"{split}.de"
        en = en_path.read_text(encoding="utf-8").splitlines()
        de = de_path.read_text(encoding="utf-8").splitlines()
        assert list(zip(en, de)) == task[split]
