"""A third architecture, written outside the package as docs/architecture.md tells a newcomer to write one, goes
through every command without a change to `nmt/`: trained by `nmt-train --arch`, decoded by beam search (batched =
one by one), scored by `nmt-score` (forced decoding = the search's own scores), ensembled with an LSTM, plotted
and served over HTTP. What this proves is the interface's claim: training, search, ensembles, scoring, plots and
the service see a model only through `forward`, `encode`, `init_state` and `step`."""
from __future__ import annotations

import dataclasses
import json
import shutil

import httpx
import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn, rnn

from nmt.config import ARCH_DEFAULTS, ConfigError, ModelConfig
from nmt.models import ARCHITECTURES, DecoderState, Seq2SeqModel, build_model, register
from nmt.models.base import array_module, fold_beams, length_mask
from nmt.translate import Translator
from tests.integration.serve_app import background_server, make_app
from tests.synth import tiny_flags, write_task
from tests.unit.test_search import assert_same_hypotheses

NAME = "toy-gru"


@dataclasses.dataclass(frozen=True)
class ToyState(DecoderState):
    source_fields = ("memory", "src_len")   # one row per sentence, shared by its beams
    source_position_fields = ("memory",)
    memory: mx.nd.NDArray   # (B,S,H)
    src_len: mx.nd.NDArray  # (B,)
    h: mx.nd.NDArray        # (N,1,H), one row per hypothesis


class ToyGRU(Seq2SeqModel):
    """A one-layer GRU encoder and decoder with dot attention (the docs' step 1: `__init__`, `hybrid_forward`,
    `encode`, `init_state`, `step` and a `DecoderState`)."""

    fixed_step_shapes = True
    config_fields = ("hidden_size",)   # the one ModelConfig field it reads: --num-layers etc. are refused for it

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, **kwargs):
        kwargs.setdefault("prefix", "toy_")
        super().__init__(cfg, src_vocab_size, tgt_vocab_size, **kwargs)
        H = cfg.hidden_size
        with self.name_scope():
            self.src_embed, self.tgt_embed = nn.Embedding(src_vocab_size, H), nn.Embedding(tgt_vocab_size, H)
            self.encoder = rnn.GRU(H, layout="NTC", input_size=H, prefix="enc_")
            self.decoder = rnn.GRU(H, layout="NTC", input_size=H, prefix="dec_")
            self.out = nn.Dense(tgt_vocab_size, flatten=False, in_units=2 * H,   # its own init (step 1)
                                weight_initializer=mx.init.Normal(1 / (2 * H) ** 0.5))

    def _decode(self, F, tgt_in, h, memory, src_len, beam: int):
        """Logits (B, beam*T, V), the new h (N,1,H) and the attention (B, beam*T, S): the one decoder both
        `hybrid_forward` (beam 1) and `step` (T = 1) run."""
        dec, states = self.decoder(self.tgt_embed(tgt_in), [F.transpose(h, axes=(1, 0, 2))])
        query = fold_beams(F, dec, beam)
        scores = F.batch_dot(query, memory, transpose_b=True)
        mask = length_mask(F, memory, src_len, axis=1)
        attn = F.softmax(F.broadcast_add(scores, F.expand_dims((1 - mask) * -1e9, axis=1)), axis=-1)
        logits = self.out(F.concat(query, F.batch_dot(attn, memory), dim=-1))
        return logits, F.transpose(states[0], axes=(1, 0, 2)), attn

    def hybrid_forward(self, F, src, src_len, tgt_in):
        memory = self.encoder(self.src_embed(src))
        h0 = F.zeros_like(F.slice_axis(memory, axis=1, begin=0, end=1))
        return self._decode(F, tgt_in, h0, memory, src_len, 1)[0]

    def encode(self, src, src_len):
        return self.encoder(self.src_embed(src)), src_len

    def init_state(self, encoded) -> ToyState:
        memory, src_len = encoded
        return ToyState(memory=memory, src_len=src_len, h=mx.nd.zeros_like(memory[:, :1]))

    def step(self, prev_tokens, state: ToyState):
        F = array_module(prev_tokens)
        logits, h, attn = self._decode(F, F.reshape(prev_tokens, shape=(-1, 1)), state.h, state.memory,
                                       state.src_len, state.beam)
        return (F.log_softmax(F.reshape(logits, shape=(-3, 0)), axis=-1), dataclasses.replace(state, h=h),
                F.reshape(attn, shape=(-3, 0)))


@pytest.fixture
def toy_arch(monkeypatch):
    """The docs' steps 2 and 3 from outside the package: the class registered, the name known to the config."""
    register(NAME)(ToyGRU)
    monkeypatch.setitem(ARCH_DEFAULTS, NAME, {})
    yield NAME
    ARCHITECTURES.pop(NAME)


def run(main, argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_a_name_in_arch_defaults_without_its_class_says_what_is_missing(monkeypatch):
    """Step 3 done and step 2 forgotten: `--arch gru`, which --help offers, was refused as "--arch must be one of
    lstm, transformer (got 'gru')", not saying that no class was registered under it."""
    monkeypatch.setitem(ARCH_DEFAULTS, "gru", {})
    with pytest.raises(ConfigError, match=r"^--arch gru: no model class is registered under that name \(registered: "
                                          r"lstm, transformer\): decorate it with @register\('gru'\) and import its "
                                          r"module in nmt/models/__init__.py"):
        build_model(ModelConfig(arch="gru"), 11, 13)


def test_a_class_without_its_arch_defaults_entry_is_refused_by_every_route(toy_arch, monkeypatch):
    """Step 2 done and step 3 forgotten: `--arch` refused the name as an invalid choice, while a --config file (or
    Python) naming it trained the model: one route now, with what is missing."""
    monkeypatch.delitem(ARCH_DEFAULTS, toy_arch)
    with pytest.raises(ConfigError, match=rf"^--arch {toy_arch}: its class is registered, but nmt/config.py's "
                                          "ARCH_DEFAULTS has no entry for it"):
        build_model(ModelConfig(arch=toy_arch), 11, 13)


def test_step_equals_the_teacher_forced_forward(toy_arch):
    model = build_model(ModelConfig(arch=toy_arch, hidden_size=8), 11, 13)
    model.initialize(mx.init.Xavier())
    src, src_len = mx.nd.array([[4, 5, 6, 2], [7, 2, 0, 0]]), mx.nd.array([4, 2])
    tgt = mx.nd.array([[1, 8, 9], [1, 10, 3]])
    forced = model.log_probs(src, src_len, tgt).asnumpy()
    state = model.init_state(model.encode(src, src_len))
    for t in range(tgt.shape[1]):
        log_probs, state, _ = model.hybrid_step(tgt[:, t], state)
        np.testing.assert_allclose(log_probs.asnumpy(), forced[:, t], rtol=1e-5, atol=1e-5)


def test_a_new_architecture_goes_through_every_command(toy_arch, tmp_path, capsys):
    from nmt.cli import train_main
    from nmt.cli_decode import translate_main
    from nmt.cli_score import score_main
    task = write_task(tmp_path / "synth", n_train=300, n_dev=12, n_test=12)
    toy, lstm = tmp_path / "toy", tmp_path / "lstm"
    lstm_only = {"--embed-size", "--num-layers", "--dropout", "--word-dropout"}   # the LSTM's flags, refused for it:
    flags = [a for i, a in enumerate(tiny_flags(task, toy)) if a not in lstm_only and tiny_flags(task, toy)[i - 1]
             not in lstm_only]
    assert train_main(flags + ["--arch", toy_arch, "--num-layers", "1"]) == 2
    assert "--num-layers is an option of --arch lstm, not of --arch toy-gru" in capsys.readouterr().err
    run(train_main, flags + ["--arch", toy_arch, "--max-steps", "40"], capsys)
    run(train_main, tiny_flags(task, lstm) + ["--max-steps", "40"], capsys)
    assert json.loads((toy / "config.json").read_text())["model"]["arch"] == toy_arch
    # the LSTM run's settings under --arch of this one, which reads no dropout: those are set back to its defaults,
    # and the warning of the settings that stay named them too ("... were chosen for lstm and stay")
    assert train_main(["--config", str(lstm / "config.json"), "--arch", toy_arch, "--model-dir", str(tmp_path / "x"),
                       "--dry-run"]) == 0
    unread, stay = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: --arch")]
    assert unread.startswith(f"warning: --arch {toy_arch} does not read the --config file's ") and \
        "model.dropout 0.0, model.word_dropout 0.0" in unread, unread
    assert "its optim.lr 0.005 was chosen for lstm and stays" in stay and "dropout" not in stay, stay
    lines = open(task["test_src"], encoding="utf-8").read().splitlines()[:6]

    tr = Translator.from_dir(toy)
    batched = tr.translate_nbest(lines, 2, beam_size=3)
    assert_same_hypotheses(batched, [tr.translate_nbest([x], 2, beam_size=3)[0] for x in lines])
    src = tmp_path / "in.ko"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = run(translate_main, ["--model-dir", toy, "--input", src, "--beam-size", "3", "--plot-attention",
                               tmp_path / "plots"], capsys)
    assert out.splitlines() == tr.translate(lines, beam_size=3)
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [f"line-{i:06d}.png" for i in range(1, 7)]

    hyp = tmp_path / "hyp.en"   # forced decoding of the search's best translations gives the search's scores
    hyp.write_text("".join(h[0][0] + "\n" for h in batched), encoding="utf-8")
    scores = run(score_main, ["--model-dir", toy, "--src-file", src, "--tgt-file", hyp], capsys).split()
    ids = [h[0][0] for h in tr.translate_ids(lines, beam_size=3, nbest=2)]   # where the text splits into the pieces
    same = [i for i, h in enumerate(batched) if tr.tgt_tok.encode([h[0][0]])[0] == list(ids[i])]   # the search wrote
    assert len(same) >= 3 and [float(scores[i]) for i in same] == pytest.approx([batched[i][0][1] for i in same],
                                                                                abs=1e-4)

    ensemble = run(translate_main, ["--model-dir", toy, "--ensemble", lstm, "--input", src], capsys)
    assert ensemble.splitlines() == Translator.from_dir(toy, ensemble=[lstm]).translate(lines)

    shutil.rmtree(tmp_path / "plots")
    with background_server(make_app(tr)) as url:
        answer = httpx.post(f"{url}/translate", json={"text": lines, "beam_size": 3}, timeout=60).json()
        info = httpx.get(f"{url}/info", timeout=60).json()
    assert [t["translation"] for t in answer["translations"]] == tr.translate(lines, beam_size=3)
    assert toy_arch in json.dumps(info)
