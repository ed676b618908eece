

def test_elastic_quick_prints_json_and_cleans_up(tmp_path):
    out = _run_quick("elastic.py", tmp_path)
    for kind in ("grow_s", "shrink_s"):
        s = out[kind]
        assert s["n"] == 1 and 0 < s["min"] <= s["median"] <= s["max"], (kind, s)
    assert out["run_state"] == "FINISHED" and out["settings"]["cycles"] == 1
    assert isinstance(out["machine"]["cpus"], int)
