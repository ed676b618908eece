"""``examples/docker/Dockerfile``, read instruction by instruction with ``dockerfile-parse``
(building it needs a Docker daemon, which the test machine may lack): its base image, the
CPU build of torch 2.13.0 installed first from PyTorch's index *added* to PyPI, raynb with
its examples' extra installed from the copied sources without replacing that torch, the
examples and notebooks in the image, the recipes' user and directories, and the tag the
Kubernetes recipe runs."""

from __future__ import annotations

import io
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "examples" / "docker" / "Dockerfile"
MANIFEST = ROOT / "examples" / "kubernetes" / "raynb.yaml"
TORCH = "torch==2.13.0+cpu"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _instructions(text: str) -> list[tuple[str, str]]:
    dfp = pytest.importorskip("dockerfile_parse", reason="pip install dockerfile-parse (the test extra)")
    parser = dfp.DockerfileParser(fileobj=io.BytesIO(text.encode()))
    return [(s["instruction"], s["value"]) for s in parser.structure if s["instruction"] != "COMMENT"]


def _pip_installs(run: str) -> list[list[str]]:
    """The argument lists of each ``pip install`` in a RUN's shell command."""
    out = []
    for command in run.replace("&&", ";").split(";"):
        words = shlex.split(command)
        if "pip" in words and words[words.index("pip") + 1 : words.index("pip") + 2] == ["install"]:
            out.append(words[words.index("pip") + 2 :])
    return out


def problems(text: str) -> list[str]:
    """What is wrong with a Dockerfile's text for raynb's image (empty: nothing)."""
    steps = _instructions(text)
    found = []
    froms = [v for i, v in steps if i == "FROM"]
    if len(froms) != 1 or not froms[0].startswith("python:3.11"):
        found.append(f"one stage from python:3.11 expected, FROM {froms}")
    installs = [(n, args) for n, (i, v) in enumerate(steps) if i == "RUN" for args in _pip_installs(v)]
    torch_at = [n for n, args in installs if TORCH in args]
    raynb_at = [n for n, args in installs if any(a.startswith(".[examples]") for a in args)]
    if not torch_at or not raynb_at or torch_at[0] >= raynb_at[0]:
        found.append(f"torch ({TORCH}) must be installed before raynb's '.[examples]': {installs}")
    for n, args in installs:
        if any(a in ("-i", "--index-url") or a.startswith("--index-url=") for a in args):
            found.append(f"pip install {args}: --index-url replaces PyPI; use --extra-index-url")
        torch_args = [a for a in args if a.split("=")[0].split("[")[0] == "torch" or a.startswith("torch==")]
        if torch_args and (torch_args != [TORCH] or CPU_INDEX not in args):
            found.append(f"pip install {args}: torch must be {TORCH} from {CPU_INDEX}")
    copied = [v.split()[:-1] for i, v in steps if i == "COPY"]
    sources = {s for srcs in copied for s in srcs}
    for need in ("pyproject.toml", "raynb", "examples", "notebooks"):
        if need not in sources:
            found.append(f"COPY {need} missing (copied: {sorted(sources)})")
    found += [f"COPY {s}: the repository has no {s}" for s in sorted(sources) if not (ROOT / s).exists()]
    if raynb_at:
        before = [s for n, (i, v) in enumerate(steps[: raynb_at[0]]) if i == "COPY" for s in v.split()[:-1]]
        if not {"pyproject.toml", "raynb"} <= set(before):
            found.append("raynb is installed before its sources are copied")
    users = [v for i, v in steps if i == "USER"]
    if users[-1:] != ["raynb"]:
        found.append(f"the image must run as raynb (uid 1000, the recipe's runAsUser), USER {users}")
    return found


def test_the_dockerfile_installs_cpu_torch_raynb_and_the_examples():
    assert problems(DOCKERFILE.read_text()) == []


def test_the_check_refuses_a_broken_dockerfile():
    text = DOCKERFILE.read_text()
    assert any(
        "--index-url replaces PyPI" in p for p in problems(text.replace("--extra-index-url", "--index-url"))
    )
    assert any("torch must be" in p for p in problems(text.replace(TORCH, "torch==2.13.0")))
    assert any("COPY notebooks" in p for p in problems(text.replace("COPY notebooks ./notebooks\n", "")))
    assert any("must run as raynb" in p for p in problems(text.replace("USER raynb\n", "")))
    swapped = text.replace(f'RUN python -m pip install --extra-index-url {CPU_INDEX} "{TORCH}"\n', "")
    swapped += f'RUN python -m pip install --extra-index-url {CPU_INDEX} "{TORCH}"\n'
    assert any("must be installed before" in p for p in problems(swapped))


def test_the_kubernetes_recipe_runs_the_images_tag_user_and_directories():
    yaml = pytest.importorskip("yaml")
    steps = _instructions(DOCKERFILE.read_text())
    tag = DOCKERFILE.read_text().split("docker build -f examples/docker/Dockerfile -t ", 1)[1].split()[0]
    env = {}
    for i, v in steps:
        if i == "ENV":
            env.update(w.split("=", 1) for w in shlex.split(v))
    for doc in (d for d in yaml.safe_load_all(MANIFEST.read_text()) if d):
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        for c in doc["spec"]["template"]["spec"]["containers"]:
            assert c["image"] == tag, (doc["kind"], c["image"], tag)
            for var in c.get("env", []):
                if var["name"] in env:
                    assert var["value"] == env[var["name"]], (doc["kind"], var, env)
