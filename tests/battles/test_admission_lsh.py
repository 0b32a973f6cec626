"""The near-duplicate check through MinHash/LSH (battles/similarity.py): candidates from
the LSH bands of the signatures stored with the tasks, the decision by exact trigram
Jaccard on them. A near-duplicate with a few words changed is still refused, a different
task is admitted, a cold process (reading the stored signatures) decides as a warm one,
a task stored without a signature is still checked, and the trigram cache stays under
its byte bound."""

import random
import tracemalloc
from datetime import timedelta

import pytest
from datasketch import MinHash
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from arena_site.exceptions import ApplicationError
from battles import admission_db
from battles.models import Task
from battles.services import task_submit
from battles.similarity import (
    SIGNATURE_BYTES,
    TrigramCache,
    jaccard,
    lsh_candidates,
    most_similar,
    signature,
    trigrams,
)

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


def candidates(query: frozenset, earlier: list[tuple[int, frozenset]]) -> set[int]:
    """The ids of ``earlier`` whose signatures share an LSH band with ``query``'s."""
    hits = lsh_candidates(signature(query), [signature(grams) for _, grams in earlier])
    return {earlier[i][0] for i in hits}


def test_a_few_words_changed_is_a_candidate_and_a_different_task_is_not():
    earlier = "open the bank statement for march and list every payment over fifty euros"
    near = "open the bank statement for april and list every payment over fifty euros"
    other = "write a short poem about the sea and save it as poem.txt in the home folder"

    assert jaccard(trigrams(earlier), trigrams(near)) >= THETA
    assert candidates(trigrams(near), [(1, trigrams(earlier))]) == {1}
    assert candidates(trigrams(other), [(1, trigrams(earlier))]) == set()


# The first 8 bytes of that text's signature, as computed when signatures were first
# stored: a stored signature stays comparable with the ones computed later.
PINNED_PREFIX = "8820e93ad905080d"


def test_a_signature_is_the_same_in_every_process():
    # given a signature computed here and one pinned when signatures were first stored
    grams = trigrams("open the bank statement for march and list every payment")
    sig = signature(grams)
    # then it has the stored width and does not depend on this process (PYTHONHASHSEED)
    assert len(sig) == SIGNATURE_BYTES == 192
    assert sig[:8].hex() == PINNED_PREFIX
    # and it is datasketch's own MinHash of the trigrams, built the ordinary way
    sketch = MinHash(num_perm=48, seed=13, scheme="affine32")
    sketch.update_batch(["\x1f".join(gram).encode() for gram in grams])
    assert sig == sketch.hashvalues.astype("<u4").tobytes()
    assert signature(frozenset()) == b"\xff" * 192  # no trigram: every value at its maximum


def test_the_decision_equals_the_full_scan_on_many_edits():
    """For texts edited by 0–6 words from random earlier ones, refusing (J ≥ θ among the
    LSH candidates, exact J) agrees with the exact scan over every earlier task."""
    rng = random.Random(1201)
    texts = [sentence(rng) for _ in range(200)]
    earlier = [(i, trigrams(text)) for i, text in enumerate(texts)]
    signatures = [signature(grams) for _, grams in earlier]
    refused = 0
    for _ in range(400):
        query = trigrams(change_words(rng, rng.choice(texts), rng.randint(0, 6)))
        _, full = most_similar(query, earlier)
        hits = lsh_candidates(signature(query), signatures)
        _, lsh = most_similar(query, [earlier[i] for i in hits])
        assert (full >= THETA) == (lsh >= THETA)
        if full >= THETA:
            assert lsh == full
            refused += 1
    assert 50 < refused < 400  # both outcomes were exercised


def test_the_trigram_cache_stays_under_its_byte_bound():
    bound = 256 * 1024
    rng = random.Random(3)
    texts = [sentence(rng, 40) for _ in range(3000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cache = TrigramCache(max_bytes=bound)
        for i, text in enumerate(texts):
            grams = trigrams(text)
            cache.put((i, signature(grams)), grams)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert cache.nbytes <= bound
    assert 0 < len(cache) < len(texts)  # the oldest went
    assert held <= bound  # what the process really holds, not just the accounting
    first, last = (trigrams(text) for text in (texts[0], texts[-1]))
    assert cache.get((0, signature(first))) is None
    assert cache.get((len(texts) - 1, signature(last))) == last


EARLIER = "Open the bank statement for March and list every payment over fifty euros"
NEAR = "Open the bank statement for April and list every payment over fifty euros"
OTHER = "Write a short poem about the sea and save it as poem.txt in the home folder"


@pytest.mark.parametrize("process", ["warm", "cold"])
def test_task_submit_refuses_a_near_duplicate_and_admits_a_different_task(alice, roster, process):
    first = task_submit(user=alice, instruction=EARLIER, rng=random.Random(1))
    if process == "cold":  # a freshly started process: nothing indexed
        admission_db.near_duplicate_cache().clear()

    with pytest.raises(ApplicationError) as refused:
        task_submit(user=alice, instruction=NEAR, rng=random.Random(2))
    assert refused.value.code == "near_duplicate"
    assert refused.value.extra["earlier_task"] == first.task_id
    assert task_submit(user=alice, instruction=OTHER, rng=random.Random(3)).task_id


def outcome(user, text: str) -> tuple[str, int | None]:
    """What admission decides for ``text``, leaving nothing behind (the rows are rolled
    back): admitted, or the refusal's code and the earlier task it names."""
    with transaction.atomic():
        try:
            task_submit(user=user, instruction=text, rng=random.Random(0))
        except ApplicationError as exc:
            return exc.code, exc.extra.get("earlier_task")
        finally:
            transaction.set_rollback(True)
    return "admitted", None


def test_a_cold_process_reading_stored_signatures_decides_as_a_warm_one(alice, roster, settings):
    # given 120 earlier tasks, each stored with its signature
    settings.ARENA = settings.ARENA.replace(queue_max=10**4, team_queue_quota=10**4)
    rng = random.Random(5)
    texts = [f"{sentence(rng, 14)} number {i}" for i in range(120)]
    for text in texts:
        task_submit(user=alice, instruction=text, rng=rng)
    stored = dict(Task.objects.filter(submitter=alice).values_list("instruction", "minhash"))
    assert all(bytes(stored[text]) == signature(trigrams(text)) for text in texts)
    queries = [change_words(rng, rng.choice(texts), rng.randint(0, 8)) for _ in range(60)]

    # when each query is decided by this (warm) process and by a fresh (cold) one
    def decide(text: str, fresh: bool) -> tuple[tuple[str, int | None], int]:
        if fresh:
            admission_db.near_duplicate_cache().clear()
        with CaptureQueriesContext(connection) as statements:
            decided = outcome(alice, text)
        return decided, len(statements)

    warm = [decide(text, fresh=False) for text in queries]
    cold = [decide(text, fresh=True) for text in queries]

    # then every decision is the same, in as many statements (the cold process reads
    # nothing more), and both outcomes occur
    assert cold == warm
    assert {"admitted", "near_duplicate"} == {code for (code, _), _ in warm}


def test_the_statement_picks_exactly_the_lsh_candidates_newest_first(alice, roster, settings):
    # given 150 earlier tasks stored with their signatures
    settings.ARENA = settings.ARENA.replace(queue_max=10**4, team_queue_quota=10**4)
    rng = random.Random(8)
    for i in range(150):
        task_submit(user=alice, instruction=f"{sentence(rng, 14)} number {i}", rng=rng)
    window = list(
        Task.objects.filter(submitter=alice)
        .order_by("-created_at")
        .values_list("id", "instruction", "minhash")
    )
    since = timezone.now() - timedelta(days=7)
    picked_total = 0
    for _ in range(80):
        text = change_words(rng, rng.choice(window)[1], rng.randint(0, 10))
        sig = signature(trigrams(text))
        # when admission's statement picks the tasks to compare exactly
        similar = admission_db.submitter_context(
            user_id=alice.pk, cap=3, since=since, limit=200, minhash=sig
        ).similar
        # then they are the rule's candidates among all stored signatures, newest first,
        # each with its instruction
        expected = lsh_candidates(sig, [bytes(minhash) for _, _, minhash in window])
        assert [task.id for task in similar] == [window[i][0] for i in expected]
        assert [task.instruction for task in similar] == [window[i][1] for i in expected]
        picked_total += len(similar)
    assert 0 < picked_total < 80 * 10  # some candidates each time, far from all 150


@pytest.mark.parametrize("process", ["warm", "cold"])
@pytest.mark.parametrize("stored", [None, b"\x00" * 10], ids=["no signature", "another width"])
def test_a_task_stored_without_a_usable_signature_is_still_checked(alice, roster, process, stored):
    # given an earlier task from before signatures were stored (or not from admission),
    # and one from an import, neither with a usable signature
    first = task_submit(user=alice, instruction=EARLIER, rng=random.Random(1))
    Task.objects.filter(pk=first.task_id).update(minhash=stored)
    imported = Task.objects.create(
        team=first.task.team, submitter=alice, instruction=OTHER, minhash=stored
    )
    if process == "cold":
        admission_db.near_duplicate_cache().clear()

    # then a near-duplicate of either is refused, naming it
    for text, earlier in ((NEAR, first.task_id), (OTHER + " please", imported.pk)):
        with pytest.raises(ApplicationError) as refused:
            task_submit(user=alice, instruction=text, rng=random.Random(2))
        assert refused.value.code == "near_duplicate"
        assert refused.value.extra["earlier_task"] == earlier
    # and a different task is admitted, with its signature stored
    third = "Download the weather report for Oslo and chart the temperatures"
    admitted = task_submit(user=alice, instruction=third, rng=random.Random(3))
    assert bytes(Task.objects.get(pk=admitted.task_id).minhash) == signature(trigrams(third))
