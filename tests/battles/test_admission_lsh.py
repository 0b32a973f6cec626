"""The near-duplicate check through MinHash/LSH (battles/similarity.py): candidates from
the LSH bands, the decision by exact trigram Jaccard on them. A near-duplicate with a few
words changed is still refused, a different task is admitted, a cold process decides as
a warm one, and the index stays under its byte bound."""

import random
import tracemalloc

import pytest

from arena_site.exceptions import ApplicationError
from battles import admission_db
from battles.services import task_submit
from battles.similarity import NearDuplicateIndex, jaccard, most_similar, trigrams

THETA = 0.55
WORDS = [
    "open",
    "find",
    "list",
    "the",
    "page",
    "file",
    "title",
    "report",
    "check",
    "count",
    "write",
    "read",
    "site",
    "save",
    "copy",
    "move",
    "delete",
    "rename",
    "search",
    "table",
    "chart",
    "mail",
    "send",
    "print",
    "sort",
    "filter",
    "merge",
    "zip",
    "download",
    "upload",
]


def sentence(rng: random.Random, n: int = 16) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def change_words(rng: random.Random, text: str, k: int) -> str:
    words = text.split()
    for i in rng.sample(range(len(words)), k):
        words[i] = rng.choice(WORDS)
    return " ".join(words)


def test_a_few_words_changed_is_a_candidate_and_a_different_task_is_not():
    index = NearDuplicateIndex(max_bytes=10**6)
    earlier = "open the bank statement for march and list every payment over fifty euros"
    index.put((1, "t1"), 7, trigrams(earlier))
    near = "open the bank statement for april and list every payment over fifty euros"
    other = "write a short poem about the sea and save it as poem.txt in the home folder"

    assert jaccard(trigrams(earlier), trigrams(near)) >= THETA
    assert index.candidates(7, trigrams(near)) == {(1, "t1")}
    assert index.candidates(7, trigrams(other)) == set()
    assert index.candidates(8, trigrams(earlier)) == set()  # another submitter's scope


def test_the_decision_equals_the_full_scan_on_many_edits():
    """For texts edited by 0–6 words from random earlier ones, refusing (J ≥ θ among the
    LSH candidates, exact J) agrees with the exact scan over every earlier task."""
    rng = random.Random(1201)
    texts = [sentence(rng) for _ in range(200)]
    earlier = [(i, trigrams(text)) for i, text in enumerate(texts)]
    index = NearDuplicateIndex(max_bytes=10**8)
    for task_id, grams in earlier:
        index.put(task_id, 1, grams)
    by_id = dict(earlier)
    refused = 0
    for _ in range(400):
        query = trigrams(change_words(rng, rng.choice(texts), rng.randint(0, 6)))
        _, full = most_similar(query, earlier)
        _, lsh = most_similar(query, [(k, by_id[k]) for k in index.candidates(1, query)])
        assert (full >= THETA) == (lsh >= THETA)
        if full >= THETA:
            assert lsh == full
            refused += 1
    assert 50 < refused < 400  # both outcomes were exercised


def test_the_index_stays_under_its_byte_bound():
    bound = 256 * 1024
    rng = random.Random(3)
    texts = [sentence(rng, 40) for _ in range(3000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        index = NearDuplicateIndex(max_bytes=bound)
        for i, text in enumerate(texts):
            index.put(i, i % 5, trigrams(text))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert index.nbytes <= bound
    assert 0 < len(index) < len(texts)  # the oldest went
    assert held <= bound  # what the process really holds, not just the accounting
    assert index.get(0) is None and index.get(len(texts) - 1) is not None
    # Evicted entries left no band behind: every band key names live entries.
    live = set(index._entries)
    for held_keys in index._bands.values():
        keys = held_keys if isinstance(held_keys, list) else [held_keys]
        assert set(keys) <= live


@pytest.fixture
def cold():
    admission_db.near_duplicate_index().clear()


EARLIER = "Open the bank statement for March and list every payment over fifty euros"
NEAR = "Open the bank statement for April and list every payment over fifty euros"
OTHER = "Write a short poem about the sea and save it as poem.txt in the home folder"


@pytest.mark.parametrize("process", ["warm", "cold"])
def test_task_submit_refuses_a_near_duplicate_and_admits_a_different_task(alice, roster, process):
    first = task_submit(user=alice, instruction=EARLIER, rng=random.Random(1))
    if process == "cold":  # a freshly started process: nothing indexed
        admission_db.near_duplicate_index().clear()

    with pytest.raises(ApplicationError) as refused:
        task_submit(user=alice, instruction=NEAR, rng=random.Random(2))
    assert refused.value.code == "near_duplicate"
    assert refused.value.extra["earlier_task"] == first.task_id
    assert task_submit(user=alice, instruction=OTHER, rng=random.Random(3)).task_id


def test_a_cold_process_indexing_in_steps_still_catches_every_near_duplicate(
    alice, roster, cold, settings
):
    """More unindexed earlier tasks than one admission indexes: the rest are compared
    exactly, so the near-duplicate of the last one is refused on every call."""
    settings.ARENA = settings.ARENA.replace(queue_max=10**4, team_queue_quota=10**4)
    rng = random.Random(5)
    texts = [f"{sentence(rng, 14)} number {i}" for i in range(admission_db.INDEX_PER_CALL + 20)]
    for text in texts:
        task_submit(user=alice, instruction=text, rng=rng)
    admission_db.near_duplicate_index().clear()
    oldest = texts[0]  # read last (newest first), so not indexed by the first calls
    for attempt in range(3):
        with pytest.raises(ApplicationError) as refused:
            task_submit(user=alice, instruction=oldest + " please", rng=rng)
        assert refused.value.code == "near_duplicate", attempt
    assert len(admission_db.near_duplicate_index()) >= len(texts)
