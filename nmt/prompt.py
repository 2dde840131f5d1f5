"""nmt-translate's interactive prompt: sentences typed at a terminal, each translated as it is entered
(`interactive`), with the prompt on stderr so that standard output holds the translations alone."""
from __future__ import annotations

import importlib
import locale
import sys
from typing import Callable, List, Optional

from nmt.corpus import CorpusError
from nmt.json_input import JSON_EXAMPLE, parse_json_line
from nmt.languages import hangul_counts, other_language_warning
from nmt.stream import translation_rows
from nmt.text import lone_surrogate, one_line, removed_controls
from nmt.translate import Translator


def prompt_on_stderr(prompt: str) -> str:
    """input() with its prompt on stderr: input() itself writes it to stdout, and so, when that is not a terminal,
    into the file or pipe standard output was redirected to (`nmt-translate ... > out.en`, typing at the terminal).
    On a terminal throughout, input() edits the line with readline: the arrow keys, Home, End and the history (the
    arrow keys were typed into the sentence)."""
    if sys.stdin.isatty() and sys.stdout.isatty() and _utf8_codeset():
        importlib.import_module("readline")   # (input() edits its lines with it, once imported)
        return input(prompt)
    sys.stderr.write(prompt)
    sys.stderr.flush()
    return input()


def _utf8_codeset() -> bool:
    """Whether the C library's character type is UTF-8: in another (LC_ALL=C) readline takes each byte of a Hangul
    syllable for a Meta key, and the typed line was lost."""
    return locale.nl_langinfo(locale.CODESET).replace("-", "").upper() == "UTF8"


def interactive(translator: Translator, nbest: Optional[int] = None,
                on_line: Optional[Callable[[int, List[str], List[List[int]]], None]] = None,
                read: Callable[[str], str] = prompt_on_stderr, alignment: bool = False,
                json_input: bool = False) -> int:
    """Prompt for sentences (on a terminal; the prompt on stderr) and print each one's `translation_rows` row to
    stdout, until end of input (Ctrl-D; 0 returned). Ctrl-C is raised (KeyboardInterrupt): it interrupts the command at
    the prompt as while a line is translated, and as everywhere else (`run_cli`: "interrupted", exit code 130, on a
    line of its own: `nmt.commands.typed_interrupt`). With `json_input` each typed line is a JSON object
    (`parse_json_line`); a bad one is reported and the prompt goes on."""
    how = f"beam {translator.decode.beam_size}" if translator.sample is None else f"--sample {translator.sample}"
    what = f"a JSON object such as {JSON_EXAMPLE}" if json_input else "a sentence"
    print(f"nmt-translate {translator.src_lang} -> {translator.tgt_lang} ({translator.model_dir}, checkpoint "
          f"{translator.checkpoint}, {how}). Type {what} and press Enter; Ctrl-D to quit (Ctrl-C interrupts, exit "
          "code 130).", file=sys.stderr)
    n, warned = 0, False
    while True:
        try:
            line = read(f"{translator.src_lang}> ")
        except EOFError:   # Ctrl-D: the end of the session (Ctrl-C, SIGTERM, SIGHUP: the command's interruption)
            print(file=sys.stderr)
            return 0
        n += 1
        prefix = None
        surrogate = lone_surrogate(line)
        if surrogate:   # bytes the terminal's encoding could not decode
            print(f"error: input:{n}: not UTF-8 text ({surrogate}): set the terminal to UTF-8, or pipe the text in "
                  "(--on-invalid-utf8 decides what to do with invalid bytes)", file=sys.stderr)
            continue
        if json_input:
            try:
                line, prefix = parse_json_line(line, n, "input")
            except CorpusError as e:
                print(f"error: {e}", file=sys.stderr)
                continue
        else:   # one typed line, one sentence, as a line of a file
            line = one_line(line)
            removed = removed_controls(line)
            if removed:   # (the arrow keys, where input() has no line editing)
                print(f"warning: input:{n}: {removed} removed before "
                      "translating (an arrow key? with standard output redirected the line cannot be edited)",
                      file=sys.stderr)
        counts = hangul_counts([line], translator.src_lang)
        if not warned and len(line.split()) > 1 and other_language_warning(*counts, translator.src_lang,
                                                                           translator.tgt_lang):
            warned = True   # (once, and not of a word alone: a name or a number; a file is warned of at its end)
            print(f"warning: input:{n}: the line {'is mostly' if counts[1] else 'has no'} Hangul, but the model "
                  f"translates {translator.src_lang} -> {translator.tgt_lang}: is it in the model's source language "
                  "(or is this the model of the other direction)?", file=sys.stderr)
        rows, best = translation_rows(translator, [line], n, nbest, alignment, [prefix] if json_input else None)
        print(rows[0], flush=True)
        if on_line is not None:
            on_line(n, [line], best)
