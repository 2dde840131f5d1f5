"""nmt: Korean<->English neural machine translation on Apache MXNet Gluon."""
from importlib import metadata as _metadata

__version__ = "0.1.0"


def _check_single_mxnet() -> None:
    """Refuse to run with both the CPU and a CUDA build of MXNet installed: they overwrite each other."""
    found = sorted({d.metadata["Name"].lower() for d in _metadata.distributions()
                    if (d.metadata["Name"] or "").lower().startswith("mxnet")})
    builds = [n for n in found if n == "mxnet" or n.startswith("mxnet-cu")]
    if len(builds) > 1:
        raise ImportError(
            f"Several MXNet builds are installed at once ({', '.join(builds)}); they write the same `mxnet` "
            "package and break each other. Uninstall all of them, then install exactly one: "
            "`pip install -r requirements/cpu.txt` (CPU) or `pip install -r requirements/gpu.txt` (CUDA 11.2).")


_check_single_mxnet()
