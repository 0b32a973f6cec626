"""Near-duplicate detection (SPEC §2): word-trigram Jaccard similarity, and the MinHash/
LSH banding that chooses which earlier tasks to compute it for. Pure."""

import re
import sys
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
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
# above it). Tokens are hashed with datasketch's sha1_hash32 and the permutations come
# from a fixed seed, so a signature is the same in every process (PYTHONHASHSEED plays
# no part) and can be stored with the task: SIGNATURE_BYTES little-endian bytes. Changing
# NUM_PERM, BANDS or _SEED changes every signature, so stored ones would have to be
# cleared (one of another length is ignored: that task is compared by its instruction).
NUM_PERM = 48
BANDS = 24
ROWS = NUM_PERM // BANDS
_SEED = 13
_DTYPE = np.dtype("<u4")
SIGNATURE_BYTES = NUM_PERM * _DTYPE.itemsize


# Computed once: a MinHash given its permutations skips drawing them.
_PERMUTATIONS = MinHash(num_perm=NUM_PERM, seed=_SEED).permutations


def signature(grams: frozenset) -> bytes:
    """The MinHash signature of a trigram set: NUM_PERM unsigned 32-bit values,
    little-endian (SIGNATURE_BYTES bytes, the form stored with the task)."""
    sketch = MinHash(num_perm=NUM_PERM, seed=_SEED, permutations=_PERMUTATIONS, scheme="affine32")
    sketch.update_batch(["\x1f".join(gram).encode() for gram in grams])
    return sketch.hashvalues.astype(_DTYPE).tobytes()


def band_offsets() -> list[tuple[int, int]]:
    """Where each of the BANDS bands lies in a signature's bytes, as (offset, length):
    two signatures are LSH candidates when the bytes of some band are equal (admission
    compares them in its SQL)."""
    width = ROWS * _DTYPE.itemsize
    return [(start, width) for start in range(0, SIGNATURE_BYTES, width)]


def lsh_candidates(sig: bytes, earlier: Sequence[bytes]) -> list[int]:
    """The positions in ``earlier`` (signatures, each SIGNATURE_BYTES long) of those
    sharing at least one band with ``sig``: the tasks to compare exactly. The rule the
    admission statement applies in the database (battles.admission_db), here for
    tests and tools."""
    if not earlier:
        return []
    bands = np.frombuffer(b"".join(earlier), dtype=_DTYPE).reshape(len(earlier), BANDS, ROWS)
    mine = np.frombuffer(sig, dtype=_DTYPE).reshape(BANDS, ROWS)
    return np.flatnonzero((bands == mine).all(axis=2).any(axis=1)).tolist()


# What an entry costs beyond its trigram set and its key's parts: the entry record, the
# key tuple and its slot in the LRU; measured with tracemalloc
# (tests/battles/test_admission_lsh.py checks the total stays under the bound).
_ENTRY_BYTES = 200


def _grams_bytes(grams: frozenset) -> int:
    """A trigram set's size, counted generously: every word once per trigram holding it."""
    return sys.getsizeof(grams) + sum(
        sys.getsizeof(gram) + sum(sys.getsizeof(word) for word in gram) for gram in grams
    )


@dataclass(frozen=True)
class _Entry:
    grams: frozenset
    nbytes: int


class TrigramCache:
    """Earlier tasks' trigram sets by key (the task's id and its signature), bounded by
    BYTES: past ``max_bytes`` the least recently used entries go (a miss only means
    reading that instruction again). Only the LSH candidates' sets are ever needed, so
    this saves a read, never a decision. Thread-safe."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._lock = Lock()

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

    def put(self, key: tuple, grams: frozenset) -> None:
        """Holds ``grams`` under ``key`` (a tuple: its parts count towards the bound)."""
        size = _ENTRY_BYTES + _grams_bytes(grams) + sum(sys.getsizeof(part) for part in key)
        entry = _Entry(grams, size)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return
            self._entries[key] = entry
            self.nbytes += entry.nbytes
            while self.nbytes > self.max_bytes and self._entries:
                _, gone = self._entries.popitem(last=False)
                self.nbytes -= gone.nbytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.nbytes = 0
