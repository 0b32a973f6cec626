"""Near-duplicate detection (SPEC §2): word-trigram Jaccard similarity. Pure."""

import re
from collections.abc import Iterable

WORD = re.compile(r"\w+", re.UNICODE)


def trigrams(text: str) -> frozenset[tuple[str, ...]]:
    """Lower-cased word trigrams. A text of fewer than three words is one gram of its
    words, so identical short texts still match and different ones do not."""
    words = WORD.findall(text.lower())
    if len(words) < 3:
        return frozenset([tuple(words)]) if words else frozenset()
    return frozenset(zip(words, words[1:], words[2:], strict=False))


def jaccard(a: frozenset, b: frozenset) -> float:
    """|A ∩ B| / |A ∪ B|; two empty sets are not similar (0)."""
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


def most_similar(
    grams: frozenset, earlier: Iterable[tuple[int, frozenset]]
) -> tuple[int | None, float]:
    """The earlier (id, trigrams) most similar to ``grams`` and its similarity."""
    best_id, best = None, 0.0
    for earlier_id, earlier_grams in earlier:
        score = jaccard(grams, earlier_grams)
        if score > best:
            best_id, best = earlier_id, score
    return best_id, best
