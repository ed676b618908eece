"""Ray's own shipped examples, run on raynb: the collector the conformance test uses, and a
benchmark of whole scripts on Ray 2.60 against raynb.

Collect: every script under the installed wheel's ``ray/tune/examples/`` and
``ray/train/examples/``; a script that downloads data, needs a GPU, uses Ray core (tasks,
actors, ``ray.util``, RLlib, Serve) or imports a package not installed here is excluded, with
the reason, by reading its source (nothing is run to decide).

Run: each script as ``raynb run SCRIPT --smoke-test`` (the flag where the script has one) and
as a copy with its imports changed (the name ``ray`` rewritten to ``raynb``); per script a
status (pass / fail / timeout), the seconds and, for a failure, the error line.

    python -m benchmarks.ray_examples --list              # the collected scripts, JSON
    python -m benchmarks.ray_examples --list --generated-data
        # also the scripts whose only exclusion is a download: run "with generated data"
        # (tests/compat/generated_data/ first on PYTHONPATH of the script and of the cluster)
    python -m benchmarks.ray_examples --conformance       # run them all, JSON per script
        (--markdown: the tables of docs/coming-from-ray.md; --expected: the passing lists of
        tests/ray_examples_expected.json; start a cluster first, `raynb start`, to share it)
    python -m benchmarks.ray_examples [--scripts a.py,b.py] [--timeout S]
        # the benchmark: wall seconds of each script on Ray 2.60 (ray.init included), on raynb
        # (cluster start included) and again on a warm raynb cluster, and the ratios, JSON
"""

from __future__ import annotations

import argparse
import ast
import importlib.machinery
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_DIRS = ("tune/examples", "train/examples")
MODES = ("raynb run", "imports changed")
# The benchmark's default scripts: fast on both, Tune (function trainable; Optuna) and Train.
BENCH_DEFAULT = (
    "tune/examples/tune_basic_example.py",
    "tune/examples/optuna_example.py",
    "train/examples/pytorch/torch_linear_example.py",
)
GENERATED_DATA_DIR = ROOT / "tests" / "compat" / "generated_data"
# What the generated-data shim (GENERATED_DATA_DIR) stands in for when it is not installed.
GENERATED_PACKAGES = ("torchvision", "datasets")
RAY_ATTEMPTS = 2  # Ray's node start gives up after a fixed 30 s, which a loaded machine can pass

_DOWNLOAD = re.compile(
    r"torchvision\.datasets|datasets\.(MNIST|FashionMNIST|CIFAR10|CIFAR100)\b|"
    r"download=True|tensorflow_datasets|\btfds\.|keras\.datasets|load_dataset\(|"
    r"from_pretrained\(|urlretrieve|get_file\(|s3://|gs://"
)
# The downloads tests/compat/generated_data does not stand in for (text corpora, pretrained
# weights, TensorFlow Datasets, other buckets).
_NOT_GENERATED = re.compile(
    r"tensorflow_datasets|\btfds\.|from_pretrained\(|urlretrieve|get_file\(|gs://|"
    r"s3://(?!anonymous@air-example-data/regression\.csv)"
)
# Scripts that fail on Ray 2.60 itself with today's libraries (written for an older API).
_BROKEN = {
    "tune/examples/mnist_ptl_mini.py": "out of date: `pl.Trainer(gpus=...)` was removed in "
    "Lightning 2.0 (it fails on Ray 2.60 too)",
    "tune/examples/mlflow_ptl.py": "out of date: passes `num_workers=` to mnist_ptl_mini's "
    "MNISTDataModule, which takes none (it fails on Ray 2.60 too)",
    "tune/examples/tf_mnist_example.py": "written for Keras 2 (`Metric.reset_states()`): this "
    "TensorFlow's Keras 3 has `reset_state()`, so it fails on Ray 2.60 here too",
}
_GPU = re.compile(r"use_gpu\s*=\s*True|[\"']gpu[\"']\s*:\s*[1-9]|num_gpus\s*=\s*[1-9]")
# Tune's searchers and schedulers that need a package of their own (Ray imports it lazily).
_EXTRA = {
    "ray.tune.search.ax": "ax",
    "ray.tune.search.bayesopt": "bayes_opt",
    "ray.tune.search.bohb": "hpbandster",
    "ray.tune.schedulers.hb_bohb": "hpbandster",
    "ray.tune.search.hyperopt": "hyperopt",
    "ray.tune.search.nevergrad": "nevergrad",
    "ray.tune.search.optuna": "optuna",
    "ray.tune.search.zoopt": "zoopt",
    "ray.tune.search.hebo": "hebo",
    "ray.tune.schedulers.pb2": "sklearn",  # Ray 2.60's PB2 fits scikit-learn's GP (GPy before)
    "ray.tune.integration.lightgbm": "lightgbm",
    "ray.tune.integration.xgboost": "xgboost",
}
_CORE = re.compile(
    r"[\"'](PPO|APPO|IMPALA|DQN|SAC)[\"']|@ray\.remote|\bray\.(remote|get|put|wait|kill|get_actor|util|rllib|serve)\b|"
    r"from ray import [^\n]*\b(remote|get|put|util|serve|rllib)\b"
)


@dataclass
class Example:
    name: str  # relative to the ray package, e.g. "tune/examples/pbt_example.py"
    path: str
    args: list[str] = field(default_factory=list)
    excluded: str | None = None  # why it is not run here
    generated_data: bool = False  # its downloads are replaced by tests/compat/generated_data


def ray_dir() -> Path:
    """The installed ``ray`` package's directory, found without importing it."""
    spec = importlib.machinery.PathFinder.find_spec("ray")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("no `ray` wheel is installed: pip install 'ray[tune,train]==2.60.*'")
    return Path(spec.submodule_search_locations[0])


def _imports(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def exclusion(path: Path, base: Path, _seen: frozenset = frozenset(), generated: bool = False) -> str | None:
    """Why ``path`` cannot run here (a download, a GPU, Ray core, a package not installed,
    not a script), or None, read from its source and that of the examples it imports.
    ``generated``: downloads (and the packages that only fetch data) are not a reason, the
    generated-data shim stands in for them."""
    source = path.read_text()
    if "__main__" not in source:
        return "a helper module of other examples, not a script"
    if m := _CORE.search(source):
        if m.group(1):
            return f"trains an RLlib algorithm ({m.group(0)}): RLlib is Ray's"
        return f"uses Ray core (`{m.group(0).strip()}`): tasks, actors, RLlib, Serve and ray.util are Ray's"
    if m := (_NOT_GENERATED if generated else _DOWNLOAD).search(source):
        return f"downloads its data (`{m.group(0)}`)"
    if m := _GPU.search(source):
        return f"needs a GPU (`{m.group(0)}`)"
    mods = _imports(ast.parse(source))
    for mod in sorted(mods):
        if top := _missing(mod, generated):
            return f"needs `{top}`, not installed here"
    for mod in sorted(
        m for m in mods if m.split(".")[:3] in (["ray", "tune", "examples"], ["ray", "train", "examples"])
    ):
        dep = base.joinpath(*mod.split(".")[1:])
        dep = dep / "__init__.py" if dep.is_dir() else dep.with_suffix(".py")
        if dep.is_file() and dep not in _seen:
            why = exclusion(dep, base, _seen | {path}, generated)
            if why and not why.startswith("a helper"):
                return f"imports {mod}, which {why}"
            if why and (w := _helper_needs(dep, generated)):
                return f"imports {mod}, which {w}"
    return None


def _missing(mod: str, generated: bool = False) -> str | None:
    top = _EXTRA.get(mod, mod.split(".")[0])
    if top in ("ray", "__future__") or importlib.util.find_spec(top) is not None:
        return None
    if mod == "horovod.torch":
        return None  # raynb serves Horovod's PyTorch API (raynb.train.horovod.torch)
    if generated and top in GENERATED_PACKAGES:
        return None
    return top


def _helper_needs(path: Path, generated: bool = False) -> str | None:
    source = path.read_text()
    if m := (_NOT_GENERATED if generated else _DOWNLOAD).search(source):
        return f"downloads its data (`{m.group(0)}`)"
    for mod in sorted(_imports(ast.parse(source))):
        if top := _missing(mod, generated):
            return f"needs `{top}`, not installed here"
    return None


def collect(generated_data: bool = False) -> list[Example]:
    """Every ``.py`` under the wheel's tune/train examples but ``__init__.py``, sorted.
    ``generated_data``: a script whose only exclusion is a download is not excluded but
    marked ``generated_data`` (run with tests/compat/generated_data's shim)."""
    base = ray_dir()
    out = []
    for d in EXAMPLE_DIRS:
        for p in sorted((base / d).rglob("*.py")):
            if p.name == "__init__.py":
                continue
            src = p.read_text()
            args = ["--smoke-test"] if "--smoke-test" in src else []
            ex = Example(str(p.relative_to(base)), str(p), args, exclusion(p, base))
            if generated_data and ex.excluded and exclusion(p, base, generated=True) is None:
                ex.excluded, ex.generated_data = _BROKEN.get(ex.name), ex.name not in _BROKEN
            out.append(ex)
    return out


def rewrite_imports(source: str) -> str:
    """The script with the name ``ray`` (as code, not in strings or after a dot) made
    ``raynb``: ``import ray`` -> ``import raynb``, ``ray.train.report`` -> ``raynb.train.report``;
    and ``horovod.torch`` -> ``raynb.train.horovod.torch`` (raynb's Horovod PyTorch API)."""
    lines = source.splitlines(keepends=True)
    hits, prev, toks = [], None, list(tokenize.generate_tokens(io.StringIO(source).readline))
    for i, tok in enumerate(toks):
        first = tok.type == tokenize.NAME and not (prev and prev.string == ".")
        if first and tok.string == "ray":
            hits.append((tok.start, 3, "raynb"))
        elif first and tok.string == "horovod" and [t.string for t in toks[i + 1 : i + 3]] == [".", "torch"]:
            hits.append((tok.start, 7, "raynb.train.horovod"))
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            prev = tok
    for (row, col), width, new in reversed(hits):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[col + width :]
    return "".join(lines)


_EXAMPLE_IMPORT = re.compile(r"\bray\.(?:tune|train)\.examples\.(\w+)\b")


def _with_local_examples(source: str, folder: Path) -> str:
    """``source`` with its imports changed, and each of Ray's example modules it imports
    (``ray.tune.examples.mnist_pytorch``) copied beside it, changed too, and imported from
    there (``mnist_pytorch``), as a user's own helper modules would be."""
    base = ray_dir()
    for name in sorted(set(_EXAMPLE_IMPORT.findall(source))):
        for d in EXAMPLE_DIRS:
            helper = base / d / f"{name}.py"
            if helper.is_file() and not (folder / helper.name).exists():
                (folder / helper.name).write_text(_with_local_examples(helper.read_text(), folder))
    names = sorted(set(_EXAMPLE_IMPORT.findall(source)))
    source = _EXAMPLE_IMPORT.sub(lambda m: m.group(1), source)
    if names:  # `ray.tune.examples.x.f(...)` after `import ray` needs `import x` now
        first = re.search(r"^(?:import |from (?!__future__ ))", source, re.M)  # after __future__
        at = first.start() if first else 0
        source = source[:at] + "".join(f"import {n}\n" for n in names) + source[at:]
    return rewrite_imports(source)


def _reason(stderr: str, stdout: str) -> str:
    lines = [ln.strip() for ln in (stderr or stdout).splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt)\b", ln)]
    return (errors[-1] if errors else (lines[-1] if lines else "no output"))[:300]


def run_example(
    ex: Example, mode: str, timeout: float, env: dict | None = None, workdir: str | None = None
) -> dict:
    """Run one example in ``mode`` (one of MODES); its status, seconds and error line."""
    tmp = tempfile.mkdtemp(prefix="raynb-ray-example-")
    try:
        if mode == "raynb run":
            cmd = [sys.executable, "-m", "raynb.cli", "run", ex.path, *ex.args]
        else:
            copy = Path(tmp) / Path(ex.path).name
            copy.write_text(_with_local_examples(Path(ex.path).read_text(), Path(tmp)))
            cmd = [sys.executable, str(copy), *ex.args]
        full_env = {**os.environ, **(env or {})}
        first = (str(GENERATED_DATA_DIR), str(ROOT)) if ex.generated_data else (str(ROOT),)
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in (*first, full_env.get("PYTHONPATH")) if p)
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                cmd, cwd=workdir or tmp, env=full_env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired as e:
            out = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            return {
                "script": ex.name,
                "mode": mode,
                "status": "timeout",
                "seconds": round(timeout, 1),
                "reason": f"no end within {timeout:.0f} s; last: {_reason(out, '')}",
            }
        secs = time.monotonic() - t0
        ok = proc.returncode == 0
        return {
            "script": ex.name,
            "mode": mode,
            "status": "pass" if ok else "fail",
            "seconds": round(secs, 2),
            "returncode": proc.returncode,
            "reason": "" if ok else _reason(proc.stderr, proc.stdout),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def conformance(examples: list[Example], modes=MODES, timeout: float = 180.0, env=None) -> list[dict]:
    """Run every example not excluded, in each mode, one after another."""
    return [run_example(ex, mode, timeout, env) for ex in examples if not ex.excluded for mode in modes]


def markdown(examples: list[Example], results: list[dict]) -> str:
    """The pass count and two tables (scripts run; scripts not run, and why) for
    docs/coming-from-ray.md."""
    by = {(r["script"], r["mode"]): r for r in results}
    ran = [e for e in examples if not e.excluded]
    counts = ", ".join(
        f"{sum(by[(e.name, m)]['status'] == 'pass' for e in ran)} of {len(ran)} {m}" for m in MODES
    )
    out = [
        f"Passing: {counts} ({len(examples) - len(ran)} of the wheel's {len(examples)} files "
        f"not run here, below).",
        "",
        "| Script | `raynb run` | imports changed |",
        "|---|---|---|",
    ]

    def cell(r):
        if r["status"] == "pass":
            return "passes"
        return f"{r['status']}: {r['reason'].split(' is not served')[0][:120]}".replace("|", "\\|")

    out += [f"| `{e.name}` | {cell(by[(e.name, MODES[0])])} | {cell(by[(e.name, MODES[1])])} |" for e in ran]
    out += ["", "| Script | Why it is not run here |", "|---|---|"]
    out += [f"| `{e.name}` | {e.excluded} |" for e in examples if e.excluded]
    return "\n".join(out)


def _timed(cmd: list[str], env: dict, cwd: str, timeout: float) -> float | None:
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        print(f"{' '.join(cmd)} failed: {_reason(proc.stderr, proc.stdout)}", file=sys.stderr)
        return None
    return round(time.monotonic() - t0, 2)


def _kill_leftovers(tmp: str) -> None:
    """SIGKILL what a timed-out Ray run left (its GCS, raylet, dashboard): the processes
    whose command line names this run's own temp directory, and nothing else."""
    import signal

    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if tmp.encode() in f.read():
                    os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass


def benchmark(names: list[str], timeout: float) -> list[dict]:
    """Per script: Ray 2.60's wall seconds (a fresh process, ray.init included), raynb's
    (``raynb run``, cluster start and stop included) and raynb's on a warm cluster."""
    base, rows = ray_dir(), []
    for name in names:
        path = str(base / name)
        args = ["--smoke-test"] if "--smoke-test" in Path(path).read_text() else []
        tmp = tempfile.mkdtemp(prefix="rnbb-")
        try:
            env = {
                **os.environ,
                "HOME": tmp,
                "RAY_TMPDIR": tmp,
                "RAYNB_HOME": f"{tmp}/raynb",
                "RAYNB_STORAGE_PATH": f"{tmp}/results",
                "RAYNB_PROGRESS": "text",
                "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
            }
            os.makedirs(env["RAYNB_HOME"], mode=0o700)
            ray_s, attempts = None, 0
            while ray_s is None and attempts < RAY_ATTEMPTS:
                attempts += 1
                try:
                    ray_s = _timed([sys.executable, path, *args], env, tmp, timeout)
                finally:
                    _kill_leftovers(tmp)
            cold = _timed([sys.executable, "-m", "raynb.cli", "run", path, *args], env, tmp, timeout)
            subprocess.run(
                [sys.executable, "-m", "raynb.cli", "start"],
                env=env,
                cwd=tmp,
                capture_output=True,
                timeout=120,
            )
            try:
                warm = _timed([sys.executable, "-m", "raynb.cli", "run", path, *args], env, tmp, timeout)
            finally:
                subprocess.run(
                    [sys.executable, "-m", "raynb.cli", "stop"],
                    env=env,
                    cwd=tmp,
                    capture_output=True,
                    timeout=60,
                )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        rows.append(
            {
                "script": name,
                "args": args,
                "ray_s": ray_s,
                "ray_attempts": attempts,
                "raynb_cold_s": cold,
                "raynb_warm_s": warm,
                "ray_over_raynb_cold": round(ray_s / cold, 2) if ray_s and cold else None,
                "ray_over_raynb_warm": round(ray_s / warm, 2) if ray_s and warm else None,
            }
        )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print the collected scripts and exit")
    ap.add_argument("--conformance", action="store_true", help="run every collected script both ways")
    ap.add_argument("--markdown", action="store_true", help="with --conformance: the docs' tables")
    ap.add_argument(
        "--expected",
        action="store_true",
        help="with --conformance: the passing scripts per mode, as in tests/ray_examples_expected.json",
    )
    ap.add_argument(
        "--generated-data",
        action="store_true",
        help="with --list / --conformance: the scripts that run with generated data instead",
    )
    ap.add_argument("--scripts", default=",".join(BENCH_DEFAULT), help="comma-separated, relative to ray/")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per script run")
    args = ap.parse_args(argv)
    if args.list:
        print(json.dumps([asdict(e) for e in collect(args.generated_data)], indent=1))
    elif args.conformance:
        examples = collect(args.generated_data)
        if args.generated_data:
            examples = [e for e in examples if e.generated_data]
        results = conformance(examples, timeout=args.timeout)
        if args.expected:
            print(
                json.dumps(
                    {
                        m: sorted(r["script"] for r in results if r["mode"] == m and r["status"] == "pass")
                        for m in MODES
                    },
                    indent=1,
                )
            )
        else:
            print(markdown(examples, results) if args.markdown else json.dumps(results, indent=1))
    else:
        before = os.getloadavg()
        rows = benchmark([s for s in args.scripts.split(",") if s], args.timeout)
        print(
            json.dumps(
                {
                    "loadavg_before": before,
                    "loadavg_after": os.getloadavg(),
                    "cpus": os.cpu_count(),
                    "scripts": rows,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
