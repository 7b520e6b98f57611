"""The checker's before-and-after comparison, in this process: what it reports, and what it must not.

The hostile submissions of test_hostile_submissions.py go through the whole grading path; these
pin the comparison's cases one by one, each undone afterwards.
"""

from __future__ import annotations

import builtins
import json

import pytest

from course import checks
from course.grading import integrity


@pytest.fixture
def changes():
    found = integrity.snapshot()
    assert found() == [], "nothing has changed yet"
    return found


def test_a_function_or_class_member_rebound_anywhere_is_reported_and_undoing_it_clears_it(changes):
    dumps, encode = json.dumps, json.JSONEncoder.encode
    json.dumps = lambda *args, **kwargs: "{}"
    json.JSONEncoder.encode = lambda self, value: "{}"
    try:
        assert {"json.dumps replaced", "json.encoder.JSONEncoder.encode replaced"} <= set(changes())
    finally:
        json.dumps, json.JSONEncoder.encode = dumps, encode
    assert changes() == []


def test_a_builtin_rebound_is_reported_and_put_back(changes):
    real = builtins.tuple
    builtins.tuple = lambda *args: ()
    try:
        assert changes() == ["builtin 'tuple' replaced"]
        assert builtins.tuple is real, "the comparison puts the real builtin back"
    finally:
        builtins.tuple = real


def test_the_course_own_values_are_compared_deeply_but_not_its_caches(changes):
    refused, (cell,) = integrity.DISHONEST, checks.observation.__closure__  # a @contextmanager: its function
    wrapped = cell.cell_contents
    integrity.DISHONEST = ()
    cell.cell_contents = lambda name: iter(())
    try:
        assert set(changes()) == {"course.grading.integrity.DISHONEST replaced", "course.checks.observation replaced"}
    finally:
        integrity.DISHONEST, cell.cell_contents = refused, wrapped
    checks._shops.append(None)  # a private cache that grows as checks run
    try:
        assert changes() == []
    finally:
        checks._shops.pop()


def test_a_rewritten_closure_or_default_of_a_watched_function_is_reported():
    def make(helper):
        def watched(value, scale=2):
            return helper(value) * scale
        return watched

    watched, other = make(abs), make(abs)
    rewritten = integrity.frozen([watched, other])
    assert rewritten() == []
    watched.__closure__[0].cell_contents = lambda value: 0
    other.__defaults__ = (0,)
    assert rewritten() == ["the check's `watched` was rewritten", "the check's `watched` was rewritten"]
