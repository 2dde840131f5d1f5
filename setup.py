"""Package `nmt`: a Korean<->English NMT trainer on MXNet Gluon.

MXNet itself is chosen by an extra (or the matching requirements file) so that the CPU and CUDA
builds are never installed side by side (both write the same `mxnet` package):

    pip install -e .[cpu]      # mxnet==1.9.1       (default; same as requirements/cpu.txt)
    pip install -e .[gpu]      # mxnet-cu112==1.9.1 (CUDA 11.2, GPUs up to sm_86; requirements/gpu.txt)
"""
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent


def _requirements(name: str) -> list:
    """Pinned requirements of requirements/NAME.txt, without comments and `-r` includes."""
    lines = (HERE / "requirements" / name).read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith(("#", "-r"))]


MXNET = {"cpu": "mxnet==1.9.1", "gpu": "mxnet-cu112==1.9.1"}

setup(
    name="nmt",
    version="0.1.0",
    description="Korean<->English neural machine translation trainer on Apache MXNet Gluon",
    long_description=(HERE / "README.md").read_text(encoding="utf-8") if (HERE / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.11,<3.12",   # the pinned requirements (fastapi, starlette, ipykernel) need 3.11
    packages=find_packages(include=["nmt", "nmt.*"]),
    package_data={"nmt": ["recipes.json", "serve/page.html"]},
    install_requires=_requirements("common.txt"),
    extras_require={
        "cpu": [MXNET["cpu"]],
        "gpu": [MXNET["gpu"]],
        "dev": [MXNET["cpu"]] + _requirements("dev.txt"),
    },
    entry_points={
        "console_scripts": [
            "nmt-train=nmt.cli:train_main",
            "nmt-translate=nmt.cli_decode:translate_main",
            "nmt-evaluate=nmt.cli_decode:evaluate_main",
            "nmt-score=nmt.cli_score:score_main",
            "nmt-launch=nmt.launch:main",
            "nmt-serve=nmt.serve:main",
            "nmt-export=nmt.export:export_main",
        ]
    },
)
