import pytest

from battles.classify import classify
from battles.similarity import jaccard, most_similar, trigrams


@pytest.mark.parametrize(
    ("text", "is_task", "rule"),
    [
        ("hi", False, "small_talk"),
        ("Hello there!", False, "small_talk"),
        ("thanks a lot", False, "small_talk"),
        ("Good morning everyone", False, "small_talk"),
        ("ok cool", False, "small_talk"),
        ("testing testing", False, "small_talk"),
        ("...", False, "small_talk"),
        ("Who are you?", False, "about_the_arena"),
        ("what can you do", False, "about_the_arena"),
        ("How does this work?", False, "about_the_arena"),
        ("are you a bot?", False, "about_the_arena"),
        ("hi, how are you?", False, "about_the_arena"),
        ("Create a file named notes.txt containing hello", True, "task"),
        ("what is 6*7", True, "task"),
        ("Open https://example.com and report the page title", True, "task"),
        ("The README of github.com/x/y, summarise it", True, "task"),
        ("hello! please list the files in the workspace", True, "task"),
        ("who are you? anyway, create a file named a.txt", True, "task"),
        ("What is the capital of France?", True, "task"),
        ("Book the cheapest flight from Berlin to Rome next Friday", True, "task"),
    ],
)
def test_classifier_table(text, is_task, rule):
    result = classify(text)
    assert (result.is_task, result.rule) == (is_task, rule)
    assert bool(result.reply) is not is_task


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("the quick brown fox", "the quick brown fox", 1.0),
        ("The Quick, brown fox!", "the quick brown fox", 1.0),  # case and punctuation
        ("a b c d", "a b c e", 1 / 3),  # {abc, bcd} vs {abc, bce}
        ("one two", "one two", 1.0),  # short texts: one gram
        ("one two", "two one", 0.0),
        ("", "", 0.0),
    ],
)
def test_trigram_jaccard(a, b, expected):
    assert jaccard(trigrams(a), trigrams(b)) == pytest.approx(expected)


def test_most_similar_names_the_earlier_task():
    earlier = [(1, "list the files here"), (2, "create a file named a.txt containing hi there")]
    grams = [(task_id, trigrams(text)) for task_id, text in earlier]
    # 6 shared trigrams of 7 in all
    assert most_similar(trigrams("create a file named a.txt containing hi"), grams) == (2, 6 / 7)
