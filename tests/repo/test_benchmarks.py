"""The benchmark scripts run and print well-formed JSON (no timing thresholds: the
machines that run the tests are too noisy for that), and leave nothing behind
(``support/quick_benchmark.py``)."""

from __future__ import annotations

from support.quick_benchmark import run_benchmark


def test_rerun_latency_quick_prints_json_and_cleans_up(tmp_path):
    out = run_benchmark(
        "rerun_latency.py", tmp_path, "--skip-torchrun", "--busy-loops", "1", "--idle-ms", "20", timeout=240
    )

    assert isinstance(out["cold_start_s"], float) and out["cold_start_s"] > 0
    warm = out["warm_rerun_ms"]
    assert set(warm) >= {"median", "p90", "min", "n"}
    for k in ("median", "p90", "min"):
        assert isinstance(warm[k], float), (k, warm)
    assert warm["n"] == 5
    assert warm["median"] > 0
    assert warm["min"] <= warm["median"] <= warm["p90"]
    assert all(isinstance(v, float) for v in out["warm_split_ms"].values()), out["warm_split_ms"]
    assert out["torchrun_s"] is None and out["speedup_vs_torchrun"] is None
    # Side by side: the floor, and the floor with a relay where the head is.
    for key in ("floor_ms", "floor_relay_ms"):
        assert out[key]["n"] == 5 and 0 < out[key]["min"] <= out[key]["median"] <= out[key]["p90"], (
            key,
            out[key],
        )
    assert out["ratio_to_floor_relay"] == round(warm["median"] / out["floor_relay_ms"]["median"], 2)
    assert out["settings"]["busy_loops"] == 1 and out["settings"]["idle_ms"] == 20
    m = out["machine"]
    assert isinstance(m["cpus"], int) and m["cpus"] >= 1
    assert isinstance(m["python"], str) and isinstance(m["torch"], str)


def test_recovery_quick_prints_json_and_cleans_up(tmp_path):
    out = run_benchmark("recovery.py", tmp_path, timeout=300)

    resume = out["resume_s"]
    assert resume["n"] == 3 and len(resume["all"]) == 3
    assert 0 < resume["min"] <= resume["median"] <= resume["max"]
    assert all(isinstance(v, float) for v in out["resume_split_ms"].values()), out["resume_split_ms"]
    assert isinstance(out["resume_median_under_target"], bool)
    total = out["total_time_s"]
    for side in ("no_failure", "one_failure"):
        assert len(total[side]["all"]) == 1 and total[side]["median"] > 0
        # Both runs trained the digits CNN to the end, the killed one after a restart.
        assert all(a >= 0.9 for a in total["final_val_accuracy"][side]), total
    assert abs(total["ratio"] - total["one_failure"]["median"] / total["no_failure"]["median"]) < 0.002
    assert out["torch_import_s"]["n"] == 1 and out["torch_import_s"]["median"] > 0
    assert isinstance(out["machine"]["cpus"], int)


def test_report_cost_quick_prints_json_and_cleans_up(tmp_path):
    out = run_benchmark("report_cost.py", tmp_path, timeout=240)
    for key in ("rank_report_us", "floor_rank_report_us"):
        s = out[key]
        assert s["n"] == 200 and 0 < s["p50"] <= s["p99"] <= s["max"], (key, s)
    cpu = out["head_client_cpu_us_per_report"]
    assert set(cpu) == {"head", "client", "total", "per_report_step"} and all(
        isinstance(v, float) for v in cpu.values()
    )
    assert set(out["split_ms"]) == {
        "submit_to_rank0_fn_start",
        "rank0_fn_start_to_first_report",
        "last_report_to_result",
    }
    assert out["ratio_to_floor"] > 0 and isinstance(out["machine"]["load_avg_1m_at_end"], float)


def test_progress_csv_quick_prints_json_and_compares_the_two_policies():
    out = run_benchmark("progress_csv.py", None, timeout=120)
    assert out["reports"] == 200
    for policy in ("bounded", "every_flush"):
        assert {"total_s", "worst_write_ms", "rewrites", "columns"} <= set(out[policy]), out[policy]
    # every flush brought a new metric: the old policy rewrote at each, the bounded one did not
    assert out["every_flush"]["rewrites"] == 20 and out["bounded"]["rewrites"] < 20, out
    assert out["bounded"]["columns"] == out["every_flush"]["columns"] == 205  # none left out at 200
    assert out["ratio_total"] > 0 and out["machine"]["cpus"] >= 1


def test_scale_trials_quick_prints_json_and_cleans_up(tmp_path):
    out = run_benchmark("scale_trials.py", tmp_path)
    assert [s["trials"] for s in out["sweeps"]] == [10, 30]
    for s in out["sweeps"]:
        assert s["wall_s"] > 0 and s["per_trial_overhead_ms"] > 0, s
        assert s["driver"]["rss_mib"] > 0 and s["head"]["rss_mib"] > 0 and s["head"]["cpu_s"] >= 0, s
        assert s["experiment_dir"]["files"] >= s["trials"], s  # a directory per trial at least
    assert [t["trials"] for t in out["table"]] == [10, 30] and all(t["update_us"] > 0 for t in out["table"])
    assert out["overhead_ratio"] > 0 and out["table_ratio"] > 0
    assert isinstance(out["machine"]["cpus"], int)


def test_scale_data_quick_prints_json_and_cleans_up(tmp_path):
    out = run_benchmark("scale_data.py", tmp_path)
    for kind in ("parquet", "in_memory"):
        assert [m["mib"] for m in out[kind]] == [32, 64], out[kind]
        for m in out[kind]:
            assert m["rows"] == m["mib"] * 2**20 // 128, m  # every row once (128 bytes of features a row)
            assert m["rows_s"] > 0 and m["mb_s"] > 0 and m["per_rank"]["peak_rss_mib"] > 0, m
    mb = out["map_batches"]  # the first size's files through map_batches, then the same loop
    assert mb["mib"] == 32 and mb["rows"] == 32 * 2**20 // 128 and mb["rows_s"] > 0, mb
    assert out["ray_data"] == {"skipped": "not asked (--ray)"}


def test_elastic_quick_prints_json_and_cleans_up(tmp_path):
    out = run_benchmark("elastic.py", tmp_path)
    for kind in ("grow_s", "shrink_s"):
        s = out[kind]
        assert s["n"] == 1 and 0 < s["min"] <= s["median"] <= s["max"], (kind, s)
    assert out["run_state"] == "FINISHED" and out["settings"]["cycles"] == 1
    assert isinstance(out["machine"]["cpus"], int)


def test_trial_threads_quick_prints_json_and_cleans_up(tmp_path):
    out = run_benchmark("trial_threads.py", tmp_path)
    assert len(out["default_s"]["all"]) == len(out["one_thread_s"]["all"]) == 1
    assert out["ratio"] > 0 and out["settings"]["trials"] == 4
    assert out["threads_seen"] and all(t >= 1 for t in out["threads_seen"]), out
