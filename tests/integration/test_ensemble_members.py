"""The checks of an ensemble's members before any model loads (`nmt.members`): a checkpoint that several members
lack is named in the first member given."""
from __future__ import annotations

import pytest

from nmt import checkpoint as ckpt
from nmt.cli_decode import translate_main
from nmt.translate import Translator
from tests.synth import synth_file, twin_of


def run(main, argv, capsys):
    """Exit code, stdout and stderr of the command (argparse's errors exit with 2, as on the command line)."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def test_a_checkpoint_no_member_has_is_named_in_the_first_member(model_dir, tmp_path, capsys):
    """`--model-dir A --ensemble B --checkpoint 30`, neither with step 30: the error named B's missing step, as the
    copy check looked B up first; the members are looked up in the order given, --model-dir first."""
    twin = twin_of(model_dir, tmp_path / "twin")
    code, _, err = run(translate_main, ["--model-dir", model_dir, "--ensemble", twin, "--checkpoint", "30",
                                        "--input", synth_file(model_dir, "test.ko")], capsys)
    assert code == 2 and "Traceback" not in err, err
    assert f"error: {model_dir / 'params.00000030'} not found in model directory {model_dir}; the steps kept there" \
        in err and str(twin) not in err, err
    with pytest.raises(ckpt.CheckpointError, match=rf"^{twin / 'params.00000030'} not found"):
        Translator.from_dir(twin, which="30", ensemble=[model_dir])
