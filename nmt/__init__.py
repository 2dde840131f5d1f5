"""nmt: Korean<->English neural machine translation on Apache MXNet Gluon.

In Python (docs/translation.md#python-api, docs/training.md#from-python):

    from nmt.translate import Translator
    tr = Translator.from_dir("models/tatoeba-ko-en")   # a model directory of nmt-train; which="best", ctx=...
    tr.translate(["고마워요."])                          # translate_nbest, translate_aligned; prefixes=[...]

`nmt.forced.score_lines(tr, sources, targets)` scores given translations, `nmt.align.align(tr, sources,
translations)` aligns them, `nmt.plot.save_attention_plot(tr, sentence, path)` draws the attention, and
`nmt.train.train(nmt.config.Config.from_dict({...}))` trains. Importing `nmt` alone loads no MXNet.
"""
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
