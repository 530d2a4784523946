"""FDB v2's aggregation and reply reading on hand-computed cases, each number worked out from the rules of
its `scoring/score.py`, `scoring/score_time.py`, `eval/eval_single_item.py` and `scoring/parse.py`
(DanielLin94144/Full-Duplex-Bench @ d7336bd, v2/)."""

from __future__ import annotations

import json

from duplexkit.bench.fdb2 import aggregate, parse

TURN, TASK = aggregate.TURN_KEY, aggregate.TASK_KEY
X = {
    TURN: [
        [[0, 10], 4, 5],
        [[10, 20], 3, "4"],  # IF a string: score.py skips it; score_time.py's float() reads it, bins skip it
        [[30, 20], 2, 2],  # end before start: score.py counts it (it never looks), score_time.py skips it
        [[5, 6], True, 1],  # a bool is a number to Python: 1
    ],
    TASK: 4,
}
Y = {TURN: [[[14, 16], 5, 3]]}  # across the 15 s bin edge; no task score
Z1 = {TURN: [[[0, 15], 2, 2]], TASK: 3}
Z2 = {TURN: [[[0, 15], 4, 4]], TASK: 5}  # the same (split, task) key: summed into one row
W = {TURN: [], TASK: 2}
FILES = [("Daily", "X", X), ("Daily", "Y", Y), ("Safety", "Z", Z1), ("Safety", "Z", Z2), ("Safety", "W", W)]


def test_score_py_rows() -> None:
    assert aggregate.summarize(FILES) == [
        # X: events 4/5, 2/2, True/1 -> TT (4+2+1)/3, IF (5+2+1)/3; task 4/1
        ["Daily", "X", 1, 3, 2.333, 2.667, 4.0],
        ["Daily", "Y", 0, 1, 5.0, 3.0, None],
        ["Safety", "W", 1, 0, None, None, 2.0],
        ["Safety", "Z", 2, 2, 3.0, 3.0, 4.0],
    ]


def test_score_time_py_rows_and_bins() -> None:
    overall, binned = aggregate.summarize_time(FILES)
    assert overall == [
        # X: events 4/5, 3/"4", True/1 -> TT (4+3+1)/3, IF (5+4+1)/3
        ["Daily", "X", 1, 3, 2.667, 3.333, 4.0],
        ["Daily", "Y", 0, 1, 5.0, 3.0, None],
        ["Safety", "W", 1, 0, None, None, 2.0],
        ["Safety", "Z", 2, 2, 3.0, 3.0, 4.0],
    ]
    empty = [None, None] * 7
    assert binned == [
        # bin 0-15: [0,10] 10 s at 4/5 and [5,6] 1 s at 1/1 -> TT 41/11, IF 51/11
        ["Daily", "X", 1, 3, 3.727, 4.636, *empty],
        # [14,16]: 1 s in each of the first two bins
        ["Daily", "Y", 0, 1, 5.0, 3.0, 5.0, 3.0, *[None, None] * 6],
        ["Safety", "W", 1, 0, None, None, *empty],
        ["Safety", "Z", 2, 2, 3.0, 3.0, *empty],
    ]
    assert len(aggregate.binned_header()) == 4 + 16 and aggregate.binned_header()[4:6] == [
        "TT[0-15]",
        "IF[0-15]",
    ]


def test_score_time_bins_only_the_files_its_second_pass_globs() -> None:
    """Its second pass globs a split folder's own files, its first searches the tree: a key found only
    deeper gets an overall row and empty bins."""
    overall, binned = aggregate.summarize_time([("Daily", "Y", Y)], binned_files=[])
    assert overall == [["Daily", "Y", 0, 1, 5.0, 3.0, None]]
    assert binned == [["Daily", "Y", 0, 1, *[None, None] * 8]]


def test_the_colon_form_is_read_by_scanning() -> None:
    reply = (
        "{\n"
        '"Turn-taking event and score": [\n'
        "  [0:04, 0:07.5]: 4, 5,\n"  # unquoted m:ss is no JSON: parse.py drops the item
        '  ["0:04", "0:07.5"]: 4, 5,\n'  # quoted, it reads as minutes:seconds
        '  [12.0, 14.0]: "3", null\n'
        "],\n"
        '"Task-specific score": 4\n'
        "}"
    )
    saved = parse.saved_text(reply)
    assert saved == reply  # not JSON: eval_single_item.py saves the raw text
    assert parse.process(saved) == {
        TURN: [[[4.0, 7.5], 4, 5], [[12.0, 14.0], 3, None]],
        TASK: 4,
    }


def test_a_json_reply_is_saved_as_its_object_and_flattened() -> None:
    items = '[[[1, 2], 4, 5], [[[3, 4], [5, 6]], "2", 3.9]]'
    reply = (
        f'Here it is:\n```json\n{{"Turn-taking event and score": {items}, "Task-specific score": "2"}}\n```'
    )
    saved = parse.saved_text(reply)
    assert json.loads(saved)[TASK] == "2"
    # every interval of an item gets its two scores, int(float()) each; the task score stays as written
    assert parse.process(saved) == {
        TURN: [[[1.0, 2.0], 4, 5], [[3.0, 4.0], 2, 3], [[5.0, 6.0], 2, 3]],
        TASK: "2",
    }
    # ... which score.py then does not count as a task score
    assert aggregate.summarize([("Daily", "t", parse.process(saved))]) == [
        ["Daily", "t", 0, 3, 2.667, 3.667, None]
    ]


def test_start_end_objects_and_brace_pairs_become_intervals() -> None:
    reply = '{"Turn-taking event and score": [[{"end": 5, "start": 3}, 4, 4], [{1.5, 2}, 1, 2]]}'
    assert parse.normalise_intervals(reply) == (
        '{"Turn-taking event and score": [[[3, 5], 4, 4], [[1.5, 2], 1, 2]]}'
    )
    # {1.5, 2} is no JSON until normalised, so the reply is saved raw, then read whole
    assert parse.saved_text(reply) == reply
    assert parse.process(reply) == {TURN: [[[3.0, 5.0], 4, 4], [[1.5, 2.0], 1, 2]]}


def test_fenced_blocks_merge_their_events_and_the_last_task_score_wins() -> None:
    text = (
        '```json\n{"Turn-taking event and score": [[[0, 1], 5, 5]], "Task-specific score": 1}\n```\n'
        "prose\n"
        '```\n{"Turn-taking event and score": [\n [2, 3]: 3, 3\n], "Task-specific score": 0}\n```'
    )
    # the second block scans; its task score 0 is falsy, so parse.py looks it up in the whole block again
    assert parse.process(text) == {TURN: [[[0.0, 1.0], 5, 5], [[2.0, 3.0], 3, 3]], TASK: 0}
    assert parse.time_s("1:02:03") == 3723.0 and parse.time_s(" '2:30' ") == 150.0
