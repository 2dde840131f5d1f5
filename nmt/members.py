"""The model directories a `Translator.from_dir(path, ensemble=[...])` loads: their files, and the further ones
(an ensemble's) checked before any model loads: each must share both vocabularies with the first, and none may hold
a model already in the ensemble (the same directory, a copy, an export of its checkpoint); then every member loaded
on each device, again if a training run replaced its checkpoint meanwhile."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import mxnet as mx

from nmt import checkpoint as ckpt
from nmt.config import Config, ConfigError
from nmt.models import build_model
from nmt.tokenizer import JOINT, Tokenizer, load_tokenizers


def model_files(model_dir: Path) -> Tuple[Config, Tokenizer, Tokenizer]:
    """The config and the source and target tokenizers of a model directory."""
    cfg = Config.load(ckpt.config_of(model_dir))
    return (cfg, *load_tokenizers(model_dir, cfg.data.src_lang, cfg.data.tgt_lang, cfg.model.shared_vocab))


def load_member(model_dir: Path, cfg: Config, src_tok: Tokenizer, tgt_tok: Tokenizer, params: Path, ctx: mx.Context):
    """The hybridized model of a model directory with its parameter file `params` (`ckpt.params_path`)."""
    try:
        net = build_model(cfg.model, src_tok.vocab_size, tgt_tok.vocab_size)
    except ConfigError as e:   # a config.json edited by hand: its model settings, in the flags' words
        raise ConfigError(f"{model_dir / ckpt.CONFIG}: {e}") from None
    ckpt.load_parameters(net, params, ctx, model_dir / ckpt.CONFIG)
    net.collect_params().setattr("grad_req", "null")   # inference only: no gradient arrays
    net.hybridize(static_alloc=True)
    return net


def checked_members(model_dir: Path, src_tok: Tokenizer, tgt_tok: Tokenizer, ensemble: Sequence[Path],
                    which: str) -> List[Tuple[Path, Config]]:
    """The further model directories of an ensemble with `model_dir` (its tokenizers `src_tok`, `tgt_tok`) and
    their configs, every member's vocabularies checked, and no model given twice, before any model is loaded. Each
    member's `which` checkpoint is looked up in the order given, `model_dir`'s first: a checkpoint none of them has
    is named in the first of them."""
    if not ensemble:
        return []
    from nmt.scoring import checkpoint_info   # (which imports nmt.translate, which imports this module)
    seen = [(model_dir, checkpoint_info(model_dir, which, quiet=True))]   # (what it takes instead: said at load)
    others: List[Tuple[Path, Config]] = []
    for other in map(Path, ensemble):
        o_cfg, o_src, o_tgt = model_files(other)
        for what, mine, theirs in (("source", src_tok, o_src), ("target", tgt_tok, o_tgt)):
            check_member_vocabulary(other, model_dir, what, mine, theirs)
        seen.append((other, refuse_repeated_member(other, seen, which)))
        others.append((other, o_cfg))
    return others


def load_members(dirs: List[Tuple[Path, Config]], which: str, src_tok: Tokenizer, tgt_tok: Tokenizer,
                 ctxs: List[mx.Context]) -> Tuple[List[dict], List[Tuple[mx.Context, list]]]:
    """The `which` checkpoint of each member (model directory, config) of `dirs` (`scoring.checkpoint_info`), and on
    each device of `ctxs` a copy of every member loaded (a hybridized block is not safe to call from two threads).
    A training run may replace or prune a checkpoint meanwhile: they are loaded again, at most three times."""
    from nmt.scoring import checkpoint_info   # (which imports nmt.translate, which imports this module)
    for attempt in range(3):
        try:
            infos = [checkpoint_info(d, which) for d, _ in dirs]   # (what it takes instead is said once)
            paths = [d / str(i["params_file"]) for (d, _), i in zip(dirs, infos)]
            loaded = [(c, [load_member(d, d_cfg, src_tok, tgt_tok, p, c) for (d, d_cfg), p in zip(dirs, paths)])
                      for c in ctxs]
            if [checkpoint_info(d, which, quiet=True) for d, _ in dirs] == infos:
                return infos, loaded
        except ckpt.CheckpointError:   # (damaged, or pruned while read: the next attempt tells)
            if attempt == 2:
                raise
    raise ckpt.CheckpointError(f"{dirs[0][0]}: its {which} checkpoint changed while it was loaded, three times (a "
                               "training run writes it): try again")


def members_sha256(shas) -> Optional[str]:
    """What names the parameters of a model, or of an ensemble, in scores.json (`Translator.params_sha256`): the
    parameter file's sha256, or for several members the sha256 of theirs, in member order (None: one is unknown)."""
    if None in shas:
        return None
    return shas[0] if len(shas) == 1 else hashlib.sha256(" ".join(shas).encode()).hexdigest()


def check_member_vocabulary(member: Path, model_dir: Path, what: str, mine: Tokenizer, theirs: Tokenizer) -> None:
    """CheckpointError unless `member`'s `what` (source or target) tokenizer `theirs` is `model_dir`'s, `mine`."""
    if mine.lang != theirs.lang:   # (a joint model is the same file in either direction: the languages tell)
        raise ckpt.CheckpointError(f"{member}: cannot join an ensemble with {model_dir}: its {what} language is "
                                   f"{theirs.lang}, {model_dir}'s {mine.lang}; ensemble members translate the same "
                                   "language pair in the same direction")
    if not mine.same_vocabulary(theirs):
        raise ckpt.CheckpointError(
            f"{member}: cannot join an ensemble with {model_dir}: its {what} SentencePiece model {theirs.path.name} "
            f"({_of(theirs)}, {theirs.vocab_size} pieces) differs from {mine.path} ({_of(mine)}, {mine.vocab_size} "
            "pieces); "
            "ensemble members must share both vocabularies (train them on the same data with the same "
            "--vocab-size, --spm-model-type and --shared-vocab)")


def _of(tok: Tokenizer) -> str:
    """The language(s) of a SentencePiece model, as an error names them: a joint model's are both."""
    return "both languages" if tok.path.name.startswith(f"spm.{JOINT}.") else tok.lang


def _checkpoint(info: dict) -> str:
    """A checkpoint as the repeated-member error names it: its file, and its step where known."""
    return str(info["params_file"]) + (f", step {info['step']}" if info.get("step") else "")


def refuse_repeated_member(member: Path, seen: Sequence[Tuple[Path, dict]], which: str) -> dict:
    """`member`'s `which` checkpoint (`scoring.checkpoint_info`); CheckpointError if it is the model of one of
    `seen` (model directories and their checkpoints'): the same directory (by path or link), or its parameters the
    same bytes (a copy of the directory, an export of that checkpoint: the sha256 their manifests record). The
    ensemble's mean would weigh that model twice."""
    from nmt.scoring import checkpoint_info   # (which imports nmt.translate, which imports this module)
    info = checkpoint_info(member, which, quiet=True)
    for earlier, theirs in seen:
        if member.resolve() == earlier.resolve():
            how = "the same directory"
        elif info["sha256"] is not None and info["sha256"] == theirs["sha256"]:
            how = f"the same parameters, sha256 {str(info['sha256'])[:12]}: a copy or an export"
        else:
            continue
        raise ckpt.CheckpointError(
            f"{member}: given twice in the ensemble (the first time as {earlier}, {how}): its checkpoint {which} "
            f"({_checkpoint(info)}) is {earlier}'s ({_checkpoint(theirs)}), which the ensemble's mean would count "
            "twice; give each model once")
    return info


def distinct_devices(ctxs: Sequence[mx.Context]) -> None:
    """ValueError for a device listed twice (as `--gpus 0,0` is refused): it would hold a second copy of every model
    and decode nothing faster."""
    repeated = next((c for i, c in enumerate(ctxs) if c in ctxs[:i]), None)
    if repeated is not None:
        raise ValueError(f"ctx lists {repeated} twice: give each device once (each gets its own copy of the model; "
                         "CPU contexts cpu(0), cpu(1) ... are distinct)")
