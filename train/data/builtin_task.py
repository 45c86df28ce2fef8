"""The built-in task: English -> German sentences about quantities of things.

A fresh clone must be able to train a Transformer without downloading
anything, so the default task is generated here from a small grammar with a
fixed seed. Every English sentence has exactly one German translation:

    three hundred twenty-one red apples are on the table
    dreihunderteinundzwanzig rote Äpfel liegen auf dem Tisch

    one big red apple is in the cupboard
    ein großer roter Apfel liegt im Schrank

    on the shelf there are twelve glasses
    auf dem Regal stehen zwölf Gläser

    there are no old books under the chair
    es liegen keine alten Bücher unter dem Stuhl

Why it is a good test of a translation model (the things §3 attention has to
learn, at toy scale):
- Number compounds: German writes units before tens in one word
  (321 -> dreihundert|ein|und|zwanzig), so the model must reorder inside a
  word and merge several English words into one.
- Agreement: the determiner and the adjective ending depend on the noun's
  gender and number, which the English sentence does not show
  (ein roter Apfel, eine rote Birne, ein rotes Buch, rote Äpfel, keine roten
  Äpfel); the verb depends on the noun (apples *lie*, bottles *stand*) and
  on number (liegt / liegen).
- Word order: an English sentence that starts with its location
  ("on the table there are ...") becomes German verb-second
  ("auf dem Tisch liegen ..."); "there are" becomes "es liegen/stehen".
- Long-distance dependency: in those two orders the verb (liegt/steht) comes
  before the noun that decides it.

Conventions (chosen, documented, tested):
- Numbers 1..999. 100 is "hundert" (not "einhundert"); 101 is "hunderteins";
  21 is "einundzwanzig" (a unit 1 before "und" is "ein"); 16 "sechzehn",
  17 "siebzehn", 30 "dreißig". English has no "and": "one hundred one",
  "three hundred twenty-one".
- The count 1 is a determiner agreeing in gender ("ein Apfel", "eine Birne",
  "ein Buch"), not the number word "eins". Larger counts ending in 1 keep the
  number word and a plural noun ("hunderteins Äpfel"); German also allows
  "hundertundein Apfel", which we do not generate.
- Count 0 is "no" / "keine" + weak plural ending ("keine roten Äpfel").
- Both sides are lower-case at the start (German nouns keep their capital)
  and have no final punctuation. Sentences are 6-12 English words.

API: `make_number_task(seed, n_train, n_valid, n_test)` returns the three
splits with no English sentence in more than one split; `write_task` writes
them as `train.en`/`train.de`/... text files.
"""

import random
from dataclasses import dataclass
from pathlib import Path

from train.data.files import write_atomic

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class Noun:
    en: str
    en_plural: str
    de: str
    de_plural: str
    gender: str  # "m", "f" or "n": decides ein/eine and the adjective ending
    posture: str  # "liegen" or "stehen": which verb German uses for it


@dataclass(frozen=True)
class Adjective:
    en: str
    de: str  # the stem; the ending is added by agreement


@dataclass(frozen=True)
class Location:
    en: str
    de: str  # already in the dative (auf dem Tisch, in der Kiste, im Schrank)


NOUNS = (
    Noun("apple", "apples", "Apfel", "Äpfel", "m", "liegen"),
    Noun("ball", "balls", "Ball", "Bälle", "m", "liegen"),
    Noun("stone", "stones", "Stein", "Steine", "m", "liegen"),
    Noun("spoon", "spoons", "Löffel", "Löffel", "m", "liegen"),
    Noun("key", "keys", "Schlüssel", "Schlüssel", "m", "liegen"),
    Noun("mug", "mugs", "Becher", "Becher", "m", "stehen"),
    Noun("pear", "pears", "Birne", "Birnen", "f", "liegen"),
    Noun("coin", "coins", "Münze", "Münzen", "f", "liegen"),
    Noun("bottle", "bottles", "Flasche", "Flaschen", "f", "stehen"),
    Noun("cup", "cups", "Tasse", "Tassen", "f", "stehen"),
    Noun("candle", "candles", "Kerze", "Kerzen", "f", "stehen"),
    Noun("lamp", "lamps", "Lampe", "Lampen", "f", "stehen"),
    Noun("book", "books", "Buch", "Bücher", "n", "liegen"),
    Noun("egg", "eggs", "Ei", "Eier", "n", "liegen"),
    Noun("knife", "knives", "Messer", "Messer", "n", "liegen"),
    Noun("glass", "glasses", "Glas", "Gläser", "n", "stehen"),
)
# English puts size/age before colour ("small red apples"); so does German.
SIZE_ADJECTIVES = (
    Adjective("small", "klein"),
    Adjective("big", "groß"),
    Adjective("old", "alt"),
    Adjective("new", "neu"),
)
COLOUR_ADJECTIVES = (
    Adjective("red", "rot"),
    Adjective("blue", "blau"),
    Adjective("green", "grün"),
    Adjective("yellow", "gelb"),
    Adjective("white", "weiß"),
    Adjective("black", "schwarz"),
)
LOCATIONS = (
    Location("on the table", "auf dem Tisch"),
    Location("on the shelf", "auf dem Regal"),
    Location("on the bench", "auf der Bank"),
    Location("in the box", "in der Kiste"),
    Location("in the cupboard", "im Schrank"),  # in + dem contracts to im
    Location("in the basket", "im Korb"),
    Location("under the chair", "unter dem Stuhl"),
    Location("under the stairs", "unter der Treppe"),
    Location("next to the bed", "neben dem Bett"),
    Location("next to the window", "neben dem Fenster"),
    Location("behind the sofa", "hinter dem Sofa"),
    Location("behind the door", "hinter der Tür"),
)
ORDERS = ("subject", "location", "there")

EN_ONES = ("", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
           "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
           "seventeen", "eighteen", "nineteen")
EN_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
DE_ONES = ("", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun",
           "zehn", "elf", "zwölf", "dreizehn", "vierzehn", "fünfzehn", "sechzehn",
           "siebzehn", "achtzehn", "neunzehn")  # sechzehn/siebzehn drop letters of sechs/sieben
DE_TENS = ("", "", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig",
           "achtzig", "neunzig")


def english_number(n: int) -> str:
    """1..999 as English words: 321 -> 'three hundred twenty-one'."""
    if not 1 <= n <= 999:
        raise ValueError(f"number must be in 1..999, got {n}")
    hundreds, rest = divmod(n, 100)
    words = [EN_ONES[hundreds], "hundred"] if hundreds else []
    if rest >= 20:
        tens, unit = divmod(rest, 10)
        words.append(EN_TENS[tens] + (f"-{EN_ONES[unit]}" if unit else ""))
    elif rest:
        words.append(EN_ONES[rest])
    return " ".join(words)


def german_number(n: int) -> str:
    """1..999 as one German word: 321 -> 'dreihunderteinundzwanzig', units before tens."""
    if not 1 <= n <= 999:
        raise ValueError(f"number must be in 1..999, got {n}")
    hundreds, rest = divmod(n, 100)
    head = "" if hundreds == 0 else "hundert" if hundreds == 1 else DE_ONES[hundreds] + "hundert"
    if rest < 20:
        return head + DE_ONES[rest]
    tens, unit = divmod(rest, 10)
    if unit == 0:
        return head + DE_TENS[tens]
    unit_word = "ein" if unit == 1 else DE_ONES[unit]  # einundzwanzig, not einsundzwanzig
    return head + unit_word + "und" + DE_TENS[tens]


@dataclass(frozen=True)
class Scene:
    """One sentence of the grammar: `count` things (0 means 'no') somewhere."""

    count: int
    noun: Noun
    adjectives: tuple[Adjective, ...]
    location: Location
    order: str  # one of ORDERS


def german_noun_phrase(count: int, noun: Noun, adjectives: tuple[Adjective, ...]) -> str:
    """Determiner/number + agreeing adjectives + noun, in the nominative."""
    if count == 1:  # mixed declension after ein/eine: -er / -e / -es by gender
        determiner = {"m": "ein", "f": "eine", "n": "ein"}[noun.gender]
        ending = {"m": "er", "f": "e", "n": "es"}[noun.gender]
        head = noun.de
    elif count == 0:  # weak declension after keine: -en
        determiner, ending, head = "keine", "en", noun.de_plural
    else:  # strong declension after a bare number: -e
        determiner, ending, head = german_number(count), "e", noun.de_plural
    return " ".join([determiner] + [a.de + ending for a in adjectives] + [head])


def english_noun_phrase(count: int, noun: Noun, adjectives: tuple[Adjective, ...]) -> str:
    quantity = "no" if count == 0 else english_number(count)
    head = noun.en if count == 1 else noun.en_plural
    return " ".join([quantity] + [a.en for a in adjectives] + [head])


def render(scene: Scene) -> tuple[str, str]:
    """The (English, German) pair for one scene."""
    en_np = english_noun_phrase(scene.count, scene.noun, scene.adjectives)
    de_np = german_noun_phrase(scene.count, scene.noun, scene.adjectives)
    be = "is" if scene.count == 1 else "are"
    verb = {("liegen", True): "liegt", ("liegen", False): "liegen",
            ("stehen", True): "steht", ("stehen", False): "stehen"}[
        (scene.noun.posture, scene.count == 1)]
    loc_en, loc_de = scene.location.en, scene.location.de
    if scene.order == "subject":
        return f"{en_np} {be} {loc_en}", f"{de_np} {verb} {loc_de}"
    if scene.order == "location":  # German verb-second after a fronted location
        return f"{loc_en} there {be} {en_np}", f"{loc_de} {verb} {de_np}"
    if scene.order == "there":  # expletive es; the verb still agrees with the noun
        return f"there {be} {en_np} {loc_en}", f"es {verb} {de_np} {loc_de}"
    raise ValueError(f"unknown order {scene.order!r}; expected one of {ORDERS}")


def sample_scene(rng: random.Random) -> Scene:
    """Draw one scene. Counts are spread over small, two- and three-digit numbers
    so each kind of compound is seen often; 0 ('no') only in the 'there' orders."""
    bucket = rng.random()
    if bucket < 0.05:
        count = 0
    elif bucket < 0.20:
        count = 1
    elif bucket < 0.40:
        count = rng.randint(2, 20)
    elif bucket < 0.65:
        count = rng.randint(21, 99)
    else:
        count = rng.randint(100, 999)
    adjectives = []
    if rng.random() < 0.5:
        adjectives.append(rng.choice(SIZE_ADJECTIVES))
    if rng.random() < 0.7:
        adjectives.append(rng.choice(COLOUR_ADJECTIVES))
    order = rng.choice(("location", "there")) if count == 0 else rng.choices(ORDERS, (2, 1, 1))[0]
    return Scene(count, rng.choice(NOUNS), tuple(adjectives), rng.choice(LOCATIONS), order)


def make_number_task(seed: int = 0, n_train: int = 20_000, n_valid: int = 500,
                     n_test: int = 500) -> dict[str, list[tuple[str, str]]]:
    """Generate the task: {"train": [(en, de), ...], "valid": ..., "test": ...}.

    Deterministic in `seed`. English sentences are unique over all splits, so
    the test set measures generalisation, not memory.
    """
    rng = random.Random(seed)
    total = n_train + n_valid + n_test
    pairs: dict[str, str] = {}  # English -> German; dict keeps insertion order
    for _ in range(50 * total + 1000):  # the grammar has millions of sentences
        if len(pairs) == total:
            break
        en, de = render(sample_scene(rng))
        pairs.setdefault(en, de)
    else:
        raise RuntimeError(f"could only generate {len(pairs)} distinct sentences of {total}")
    ordered = list(pairs.items())
    return {"train": ordered[:n_train],
            "valid": ordered[n_train:n_train + n_valid],
            "test": ordered[n_train + n_valid:]}


def write_task(out_dir: str | Path, seed: int = 0, n_train: int = 20_000, n_valid: int = 500,
               n_test: int = 500) -> dict[str, tuple[Path, Path]]:
    """Write `<split>.en` and `<split>.de` (one sentence a line, UTF-8) into `out_dir`.

    Returns {split: (english_path, german_path)}. Each file is written whole or not at
    all, test.de last: its presence means the task is complete (prepare.resolve_paths).
    """

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    task = make_number_task(seed, n_train, n_valid, n_test)
    paths = {}
    for split, pairs in task.items():
        en_path, de_path = out / f"{split}.en", out / f"{split}.de"
        write_atomic(en_path, "".join(en + "\n" for en, _ in pairs).encode("utf-8"))
        write_atomic(de_path, "".join(de + "\n" for _, de in pairs).encode("utf-8"))
        paths[split] = (en_path, de_path)
    return paths
