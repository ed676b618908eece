"""read_sql on queries and factories that would lose data or fail obscurely: a column
name returned twice (one column's values overwrote the other's) and a factory that
returns no connection are refused, naming the fix."""

from __future__ import annotations

import sqlite3

import pytest

import raynb.data as rd


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "t.db")
    with sqlite3.connect(path) as c:
        c.execute("create table t(a, b)")
        c.executemany("insert into t values (?, ?)", [(1, "x"), (2, "y")])
    return path


def test_a_column_returned_twice_is_refused(db):
    with pytest.raises(ValueError, match=r"returns column\(s\) \['a'\] more than once; .*AS a2"):
        rd.read_sql("select a, b, a from t", lambda: sqlite3.connect(db))
    rows = rd.read_sql("select a, a as a2 from t", lambda: sqlite3.connect(db)).take_all()
    assert rows == [{"a": 1, "a2": 1}, {"a": 2, "a2": 2}]


def test_a_factory_returning_no_connection_is_named(db):
    with pytest.raises(TypeError, match=r"connection_factory\(\) returned NoneType, not a DB-API connection"):
        rd.read_sql("select 1", lambda: None)
