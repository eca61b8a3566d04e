"""CTranslate2 rewriters (the format OPUS-MT and Argos translation models ship in): a
`ctranslate2.Translator` decodes a whole batch per call, with its own search. Inputs are
tokenized with the folder's tokenizer.json and handed over as token strings; the output
strings are mapped back to ids with the same vocabulary, then detokenized.

One call serves inputs with the same decoding options (the batcher groups them).

Seeds: CTranslate2 seeds each of its worker threads' random generator once, when the thread
first samples, so re-seeding a running Translator does nothing. A sampled request with a
seed therefore runs on a private Translator (its fresh thread takes the seed); loading one
costs about as long as loading the model, which is what "same seed, same output" costs here."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import ctranslate2

from inferd.errors import ModelLoadFailed
from inferd.runtimes.seq2seq.decoding import DecodeParams
from inferd.runtimes.seq2seq.files import Seq2SeqFiles

log = logging.getLogger("inferd.runtimes.seq2seq")


class Ct2Seq2Seq:
    def __init__(self, files: Seq2SeqFiles, id_to_token: Any, token_to_id: Any, threads: int | None = None):
        try:
            self.translator = ctranslate2.Translator(str(files.folder), device="cpu", inter_threads=1,
                                                     intra_threads=threads or 0)
        except Exception as e:  # ctranslate2 raises RuntimeError/ValueError for bad folders
            raise ModelLoadFailed(f"ctranslate2 could not load {files.folder}: {e}") from e
        self.folder, self.threads = str(files.folder), threads or 0
        self.id_to_token, self.token_to_id = id_to_token, token_to_id
        self.graph_paths = {"model": str(files.graphs["model"])}
        self.calls = 0
        self.stopped = 0   # inputs whose decoding stopped early because their request went away

    @staticmethod
    def key(p: DecodeParams) -> tuple:
        """Inputs with equal keys can share one translate_batch call."""
        return (p.num_beams, p.num_return, p.max_length, p.do_sample, p.temperature, p.top_p, p.top_k, p.seed,
                p.length_penalty, p.no_repeat_ngram_size, p.eos, p.min_length)

    def run(self, inputs: Sequence[tuple[int, ...]], p: DecodeParams,
            gone: Sequence[Any] | None = None) -> list[list[list[int]]]:
        """Generated ids (end token included when produced) per input, best first. `gone[i]`
        (an Event) set means input i's request left: with greedy or sampled decoding (the only
        ones CTranslate2 calls back for) its decoding stops at the next step."""
        source = [[self.id_to_token(i) for i in ids] for ids in inputs]
        translator = self.translator
        if p.do_sample and p.seed is not None:
            ctranslate2.set_random_seed(int(p.seed) % 2**32)
            translator = ctranslate2.Translator(self.folder, device="cpu", inter_threads=1,
                                                intra_threads=self.threads)
        end = [self.id_to_token(e) for e in p.eos] or None
        res = translator.translate_batch(
            source, beam_size=p.num_beams, num_hypotheses=p.num_return, length_penalty=p.length_penalty,
            no_repeat_ngram_size=p.no_repeat_ngram_size, max_decoding_length=p.max_length - 1,
            min_decoding_length=max(0, p.min_length - 1), return_end_token=True, end_token=end,
            sampling_topk=(p.top_k or 0) if p.do_sample else 1, sampling_topp=p.top_p if p.do_sample else 1.0,
            sampling_temperature=p.temperature if p.do_sample else 1.0, max_input_length=0,
            callback=self._stopper(gone) if gone is not None and p.num_beams == 1 else None)
        self.calls += 1
        return [[[self.token_to_id(t) for t in hyp] for hyp in r.hypotheses] for r in res]

    def _stopper(self, gone: Sequence[Any]) -> Any:
        stopped: set[int] = set()

        def callback(step: Any) -> bool:
            if gone[step.batch_id].is_set():
                if step.batch_id not in stopped:
                    stopped.add(step.batch_id)
                    self.stopped += 1
                return True
            return False

        return callback
