"""`nmt-score`: given translations scored under a model by forced decoding (`nmt.forced`), one score per line pair;
the flags and outputs it shares with the other decoding commands are in `nmt.cli_io`."""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from pathlib import Path
from typing import Optional

from nmt.config import Config, ConfigError
from nmt.flags import DECODE_FLAGS
from nmt.cli_io import (add_model_decode_args, check_languages_of, load_translator, misaligned, open_output,
                        output_errors, reader_gone, refuse_overwriting)
from nmt.commands import CommandParser, Once, command, file_arg, nonempty, one_stdin, usable_streams

# Flags of nmt-score: how a translation is scored and batched (the search's flags do not apply).
SCORE_FLAGS = [f if f.flag != "--max-input-tokens" else dataclasses.replace(
    f, help="longer source sentences are truncated with a warning; a translation longer than 3 x (this + the "
            "search's most for such a source) is an error naming its line")
    for f in DECODE_FLAGS if f.flag in ("--length-penalty", "--decode-batch-size", "--max-input-tokens")]


def build_score_parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog="nmt-score", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Score given translations under a model (forced decoding): one score per line pair, the "
                    "summed log-probability of the translation's pieces and EOS divided by the GNMT length penalty "
                    "(--length-penalty 0: the plain log-probability), as beam search scores its hypotheses. "
                    "Higher is better. For filtering a parallel corpus, reranking n-best lists or comparing models "
                    "on references; the corpus perplexity is logged at the end.",
        epilog="Examples:\n  nmt-score --model-dir M --src-file train.ko --tgt-file train.en > scores\n"
               "  nmt-score --model-dir M --src-file test.ko --tgt-file hyps.en --length-penalty 0 "
               "--output-format json\n")
    add_model_decode_args(p, SCORE_FLAGS, nbest=False)
    g = p.add_argument_group("input and output")
    g.add_argument("--src-file", action=Once, required=True, type=nonempty(file_arg),
                   help="source sentences, UTF-8, one per line (-: standard input)")
    g.add_argument("--tgt-file", action=Once, required=True, type=nonempty(file_arg),
                   help="translations of --src-file, line by line (-: standard input)")
    g.add_argument("--output", action=Once, type=nonempty(file_arg), help="output file (default: stdout)")
    g.add_argument("--output-format", action=Once, choices=("score", "json"), default="score",
                   help="score: one number per line (default); json: one object per line with the score, the "
                        "log-probability, the length and every piece's log-probability")
    g.add_argument("--alignment", action="store_true",
                   help="also give each pair's word alignment from the attention, as marian-scorer does: "
                        "'score ||| 0-1 1-0' (source word - translation word, from 0), or \"alignment\" in json")
    return p


@command(build_score_parser)
def score_main(args: argparse.Namespace) -> int:
    import contextlib
    import math
    import time
    from nmt.corpus import drop_blank_ends, read_lines
    from nmt.evaluate import perplexity
    from nmt import stream
    from nmt.align import align_ids
    from nmt.forced import SCORE_CHUNK, score_ids, target_ids
    from nmt.log import Every, setup_logging
    from nmt.signals import deferred
    one_stdin({"--src-file": args.src_file, "--tgt-file": args.tgt_file})
    usable_streams([args.src_file, args.tgt_file], [args.output])
    refuse_overwriting("--output", args.output, {"--src-file": args.src_file, "--tgt-file": args.tgt_file},
                       [args.model_dir, *args.ensemble])
    setup_logging(None, level=logging.DEBUG if args.verbose else logging.INFO)   # the files' warnings come first
    # every line a pair, an empty source or translation too (even all of them: blank_ok); a long source is cut
    src = read_lines(args.src_file, keep_blank_end=True, blank_ok=True, max_input_tokens=max_input_tokens(args))
    tgt = read_lines(args.tgt_file, keep_blank_end=True, blank_ok=True)
    drop_blank_ends([(args.src_file, src), (args.tgt_file, tgt)], keep_blank_pairs=True)   # an editor's last lines
    if len(src) != len(tgt):
        raise misaligned(args.src_file, src, "--tgt-file", args.tgt_file, tgt, "--tgt-file", "--src-file")
    tr = load_translator(args, search=False)
    check_languages_of(tr, src, tgt, f"--src-file {args.src_file}", f"--tgt-file {args.tgt_file}")
    tgt_ids = target_ids(tr, tgt, name=args.tgt_file)   # every target checked before anything is written
    t0, log_prob, tokens, chunk = time.perf_counter(), 0.0, 0, SCORE_CHUNK
    report = Every(stream.REPORT_SECONDS)   # a long corpus: how far it got
    with output_errors(args.output), contextlib.ExitStack() as stack:   # (SIGTERM: closed whole, `run_cli`)
        out = open_output(stack, args.output)
        for start in range(0, len(src), chunk):
            src_ids, part = tr.source_ids(src[start:start + chunk], start + 1), tgt_ids[start:start + chunk]
            scored = score_ids(tr, src_ids, part, tr.decode.length_penalty_alpha)
            links = align_ids(tr, src_ids, part) if args.alignment else None
            try:
                with deferred():   # (a signal while a slow reader takes the chunk: its lines written whole)
                    out.write("".join(_score_row(s, args.output_format, links and links[k]) + "\n"
                                      for k, s in enumerate(scored)))
                    out.flush()
            except BrokenPipeError:
                return reader_gone()
            log_prob += math.fsum(s.log_prob for s in scored)
            tokens += sum(len(s.pieces) for s in scored)
            if start + len(scored) < len(src) and report.due():
                logging.getLogger("nmt.forced").info("%d of %d pairs scored so far", start + len(scored), len(src))
    logging.getLogger("nmt.forced").info(
        "scored %d pair%s in %.1f s: %d target tokens (EOS included), perplexity %.2f%s", len(src),
        "s" * (len(src) != 1), time.perf_counter() - t0, tokens, perplexity(-log_prob, tokens) if tokens else
        float("nan"), f"; {tr.truncated} source{'s' * (tr.truncated != 1)} truncated" if tr.truncated else "")
    return 0


def max_input_tokens(args: argparse.Namespace) -> Optional[int]:
    """--max-input-tokens, else the model's (its config.json's), which the sources are read for before the model
    loads (`read_lines` cuts a line far longer); None when its settings cannot be read (said as the model loads)."""
    given = getattr(args, "decode.max_input_tokens", None)
    if given is not None:
        return given
    try:
        return Config.load(Path(args.model_dir) / "config.json").decode.max_input_tokens
    except (ConfigError, OSError):
        return None


def _score_row(scored, output_format: str, links) -> str:
    """One line of nmt-score's output: the score (and " ||| " and the links of `links`, unless None), or its JSON
    object (with "alignment")."""
    from nmt.align import format_links
    if output_format == "json":
        row = scored.as_json() if links is None else {**scored.as_json(), "alignment": format_links(links)}
        return json.dumps(row, ensure_ascii=False)
    return f"{scored.score:.6f}" if links is None else f"{scored.score:.6f} ||| {format_links(links)}"


if __name__ == "__main__":   # `python -m nmt.cli_score`: nmt-score
    raise SystemExit(score_main())
