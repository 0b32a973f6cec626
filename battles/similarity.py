"""Near-duplicate detection (SPEC §2): word-trigram Jaccard similarity, and the MinHash/
LSH banding that chooses which earlier tasks to compute it for. Pure."""

import re
import sys
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from threading import Lock

import numpy as np
from datasketch import MinHash

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


# --- MinHash/LSH: which earlier tasks to compare at all ------------------------------
#
# The decision stays the exact Jaccard J ≥ θ of the trigram sets above. LSH only picks
# the candidates: each task's trigram set gets a MinHash signature (datasketch) of
# NUM_PERM values, cut into BANDS bands of ROWS values; two tasks are candidates when
# some band is identical. For a pair with Jaccard J, P(candidate) = 1 − (1 − J^ROWS)^BANDS:
#   J = 0.55 (θ): 1 − 1.8e-4     J = 0.7: 1 − 1e-7      (false negatives: a near-duplicate
#   J = 0.2: 0.62                J = 0.05: 0.06          missed only with that probability)
# A false positive costs one exact Jaccard and never changes the decision; a false
# negative lets a near-duplicate through with the probability above (at J = θ; less
# above it). Tokens are hashed with datasketch's sha1_hash32, so signatures do not
# depend on the process (PYTHONHASHSEED).
NUM_PERM = 48
BANDS = 24
ROWS = NUM_PERM // BANDS
_SEED = 13


# Computed once: a MinHash given its permutations skips drawing them.
_PERMUTATIONS = MinHash(num_perm=NUM_PERM, seed=_SEED).permutations


def signature(grams: frozenset) -> np.ndarray:
    """The MinHash signature of a trigram set: NUM_PERM unsigned 32-bit values."""
    sketch = MinHash(num_perm=NUM_PERM, seed=_SEED, permutations=_PERMUTATIONS, scheme="affine32")
    sketch.update_batch(["\x1f".join(gram).encode() for gram in grams])
    return sketch.hashvalues


def band_keys(scope: int, sig: np.ndarray) -> list[int]:
    """The signature's BANDS band keys within ``scope`` (the submitter: only their own
    tasks are ever candidates), as Python ints (hashes of the band's bytes)."""
    raw = sig.tobytes()
    width = ROWS * sig.itemsize
    return [hash((scope, band, raw[band * width : (band + 1) * width])) for band in range(BANDS)]


# What an index entry costs beyond its trigram set: the entry record and its slot in the
# LRU, and per band the dict slot (load ≤ 2/3), the band key's int; measured with
# tracemalloc (tests/battles/test_admission_lsh.py checks the total stays under the bound).
_ENTRY_BYTES = 200
_BAND_BYTES = 90


def _grams_bytes(grams: frozenset) -> int:
    """A trigram set's size, counted generously: every word once per trigram holding it."""
    return sys.getsizeof(grams) + sum(
        sys.getsizeof(gram) + sum(sys.getsizeof(word) for word in gram) for gram in grams
    )


@dataclass(frozen=True)
class _Entry:
    grams: frozenset
    bands: tuple[int, ...]
    nbytes: int


class NearDuplicateIndex:
    """Earlier tasks' trigram sets and LSH band keys by key (the task's id and creation
    time), each within its scope (the submitter), bounded by BYTES: past ``max_bytes``
    the least recently used entries go (a miss only means reading that instruction
    again). Thread-safe; nothing here decides, it only finds candidates."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._bands: dict[int, Hashable | list] = {}  # band key → a key, or a list of them
        self._lock = Lock()
        # The last set's band keys: admission asks for candidates, then indexes the same
        # set (the same object) once the task is stored; a signature is ~50 µs.
        self._last: tuple[int, frozenset, tuple[int, ...]] | None = None

    def _band_keys(self, scope: int, grams: frozenset) -> tuple[int, ...]:
        last = self._last
        if last is not None and last[0] == scope and last[1] is grams:
            return last[2]
        bands = tuple(band_keys(scope, signature(grams)))
        self._last = (scope, grams, bands)
        return bands

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> frozenset | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry.grams

    def lookup(self, keys: Iterable[Hashable]) -> dict:
        """The trigram sets of those of ``keys`` held (one lock for all), each marked
        as recently used."""
        found = {}
        with self._lock:
            for key in keys:
                entry = self._entries.get(key)
                if entry is not None:
                    self._entries.move_to_end(key)
                    found[key] = entry.grams
        return found

    def put(self, key: Hashable, scope: int, grams: frozenset) -> None:
        bands = self._band_keys(scope, grams)
        entry = _Entry(grams, bands, _ENTRY_BYTES + _grams_bytes(grams) + _BAND_BYTES * BANDS)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return
            self._entries[key] = entry
            self.nbytes += entry.nbytes
            for band in bands:
                held = self._bands.get(band)
                if held is None:
                    self._bands[band] = key
                elif isinstance(held, list):
                    held.append(key)
                else:
                    self._bands[band] = [held, key]
            while self.nbytes > self.max_bytes and self._entries:
                self._evict()

    def _evict(self) -> None:
        key, entry = self._entries.popitem(last=False)
        self.nbytes -= entry.nbytes
        for band in entry.bands:
            held = self._bands.get(band)
            if isinstance(held, list):
                held.remove(key)
                if len(held) == 1:
                    self._bands[band] = held[0]
            elif held == key:
                del self._bands[band]

    def candidates(self, scope: int, grams: frozenset) -> set:
        """Keys of the scope's entries sharing a band with ``grams`` (see BANDS)."""
        found: set = set()
        bands = self._band_keys(scope, grams)
        with self._lock:
            for band in bands:
                held = self._bands.get(band)
                if held is None:
                    continue
                if isinstance(held, list):
                    found.update(held)
                else:
                    found.add(held)
        return found

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bands.clear()
            self.nbytes = 0
            self._last = None
