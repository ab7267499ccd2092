"""ckpt.report and the save timing it draws (scripts/test-report.py opens
the pages in a browser; this checks the Python side without one)."""

import array
import json
import re

import pytest

import ckpt


def page_data(path):
    text = open(path, encoding="utf-8").read()
    found = re.search(
        r'<script type="application/json" id="ckpt-data">(.*?)</script>',
        text, re.S)
    assert found, "the page carries no data"
    # No '<' at all: no user text can end the element or start a comment.
    assert "<" not in found.group(1)
    return json.loads(found.group(1))


def test_report_of_a_root_holds_its_steps_edges_and_timing(tmp_path):
    root = str(tmp_path / "run")
    mgr = ckpt.CheckpointManager(root, create=True, chunk_size=4096)
    w = array.array("f", [0.0] * 4096)
    hostile = "x</script><!--<script>"  # a metric name is the user's text
    mgr.save(1, {"w": w}, metrics={"loss": 1.0, hostile: 2.0})
    w[0] = 1.0
    result = mgr.save(2, {"w": w}, metrics={"loss": 0.5}, incremental=True)
    timing = result.info.timing
    assert timing["save_ms"] >= timing["commit_ms"] >= 0
    assert timing["stall_ms"] == timing["save_ms"] and not timing["async"]
    assert [r["rank"] for r in timing["ranks"]] == [0]
    assert mgr.list()[-1].timing == timing
    path = str(tmp_path / "run.html")
    assert ckpt.report(root, path) == path
    data = page_data(path)
    assert data["steps"]["step"] == [1, 2]
    assert data["steps"]["full"] == [True, False]
    assert data["edges"] == [[2, 1, result.info.referenced_bytes]]
    assert data["metrics"] == {"loss": [[1, 1.0], [2, 0.5]],
                               hostile: [[1, 2.0]]}
    assert data["ranks"]["rank"] == [0]


def test_report_errors(tmp_path):
    with pytest.raises(ckpt.InvalidArgument, match="root or a catalog"):
        ckpt.report(None, str(tmp_path / "x.html"))
    missing = str(tmp_path / "missing")
    with pytest.raises(ckpt.NotFound, match="missing") as raised:
        ckpt.report(missing, str(tmp_path / "x.html"))
    assert str(raised.value).startswith("ckpt report: open ")
    assert not (tmp_path / "x.html").exists()
    mgr = ckpt.CheckpointManager(str(tmp_path / "run"), create=True)
    mgr.save(1, {"w": array.array("f", [0.0])})
    with pytest.raises(ckpt.NotFound, match="no such catalog"):
        ckpt.report(mgr.url, str(tmp_path / "x.html"),
                    catalog=str(tmp_path / "nowhere.sqlite"))
    with pytest.raises(ckpt.InvalidArgument, match="--goal"):
        ckpt.report(mgr.url, str(tmp_path / "x.html"), goal="avg")
    assert not (tmp_path / "x.html").exists()
