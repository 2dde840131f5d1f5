"""nmt: Korean<->English neural machine translation on Apache MXNet Gluon.

In Python (docs/translation.md#python-api, docs/training.md#from-python):

    from nmt.translate import Translator
    tr = Translator.from_dir("models/tatoeba-ko-en")   # a model directory of nmt-train; which="best", ctx=...
    tr.translate(["고마워요."])                          # translate_nbest, translate_aligned; prefixes=[...]

`nmt.forced.score_lines(tr, sources, targets)` scores given translations, `nmt.align.align(tr, sources,
translations)` aligns them, `nmt.plot.save_attention_plot(tr, sentence, path)` draws the attention, and
`nmt.train.train(nmt.config.Config.from_dict({...}))` trains. Importing `nmt` alone loads no MXNet; the first
`import mxnet` after it (any nmt module's, gluonnlp's, a script's) is refused while DMLC_ROLE would make it a
distributed job's scheduler or server (`dmlc_role_problem`).
"""
import os as _os
import sys as _sys
from importlib import metadata as _metadata

__version__ = "0.1.0"


def mxnet_builds_problem() -> str:
    """"" unless the CPU and a CUDA build of MXNet (or two CUDA builds) are installed at once, which write the same
    `mxnet` package and break each other: then what to do. `nmt.models` refuses to load then, and the commands say
    it in one line (`nmt.commands.import_failure`)."""
    found = sorted({d.metadata["Name"].lower() for d in _metadata.distributions()
                    if (d.metadata["Name"] or "").lower().startswith("mxnet")})
    builds = [n for n in found if n == "mxnet" or n.startswith("mxnet-cu")]
    if len(builds) < 2:
        return ""
    return (f"Several MXNet builds are installed at once ({', '.join(builds)}); they write the same `mxnet` package "
            f"and break each other. Uninstall them all, `pip uninstall -y {' '.join(builds)}`, then install exactly "
            "one: `pip install 'mxnet==1.9.1' 'numpy>=1.21,<1.24'` (CPU) or `pip install 'mxnet-cu112==1.9.1' "
            "'numpy>=1.21,<1.24'` (CUDA 11.2)")


def dmlc_role_problem() -> str:
    """"" unless DMLC_ROLE is set to anything but "worker" (even ""): MXNet's import then makes this process a
    scheduler or server of a distributed job, which waits for the job for good (an unknown role too) or, without the
    job's other DMLC_* variables, fails with a C++ traceback; then the one line that says so (to a command, and to
    any code importing MXNet after nmt, a Python caller's too: the guard of MXNet's import)."""
    role = _os.environ.get("DMLC_ROLE")
    if role is None or role == "worker":
        return ""
    return (f"DMLC_ROLE={role!r}: MXNet would start this process as a scheduler or server of a distributed job as it "
            "loads, instead of running nmt; nmt runs as a job's worker (DMLC_ROLE=worker, as nmt-launch sets it) or "
            "outside any job: unset DMLC_ROLE")


class _RoleGuard:
    """A meta path finder that refuses the import of MXNet with `dmlc_role_problem` (a ConfigError: the commands and
    scripts say it in one line, a Python caller gets it raised), before MXNet's own import can start a job's node.
    Every other import, and MXNet's under no or a worker's DMLC_ROLE, it leaves to the finders after it."""

    @staticmethod
    def find_spec(name, path=None, target=None):   # (importlib.abc.MetaPathFinder's protocol)
        problem = dmlc_role_problem() if name == "mxnet" else ""
        if problem:
            from nmt.config_checks import ConfigError
            raise ConfigError(problem)
        return None


# once, though nmt be imported again: importlib.reload(nmt) makes another _RoleGuard class, which an isinstance
# check of the earlier one's instance missed (a guard more at each reload)
if not any(type(f).__module__ == __name__ and type(f).__qualname__ == "_RoleGuard" for f in _sys.meta_path):
    _sys.meta_path.insert(0, _RoleGuard())
