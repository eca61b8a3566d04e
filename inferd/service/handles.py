"""What the registry holds for a loaded model: a typed handle = the leaf runtime plus the
scheduler that owns its worker thread. Built by the kinds' loaders (inferd/kinds), never by a
runtime. Runtimes satisfy the Protocols below structurally; they import nothing from here.

Every handle is a `Handle[R, S]`: `runtime`, `scheduler`, `size_bytes` (estimated resident
size, for the memory budget), `stats` and `close()`, which stops the scheduler before any
native state is freed. Which handle a kind's loaders return is said by its module in
inferd/kinds/ (the kind's KindSpec), so `Registry.use(name, KIND)` yields that type."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from inferd.scheduling.batcher import Batcher
from inferd.scheduling.generation import Backend, GenerationEngine
from inferd.scheduling.jobs import Adapters
from inferd.scheduling.speech import SpeechQueue, SpeechRuntime
from inferd.scheduling.synthesis import SpeakerRuntime, SynthesisQueue
from inferd.types import Image, SamplingParams

if TYPE_CHECKING:  # the seq2seq runtime imports tokenizers: only when a rewriter loads
    from inferd.runtimes.seq2seq.decoding import DecodeParams
    from inferd.runtimes.seq2seq.model import Rewriter  # noqa: F401 (RewriterHandle's base names it in a string)
    from inferd.scheduling.seq2seq import Seq2SeqScheduler

log = logging.getLogger("inferd.handles")


# ---- runtime Protocols ----------------------------------------------------------------------
class GeneratorRuntime(Backend, Protocol):
    """A text generator: the engine's Backend plus what the service needs to prepare a request."""

    name: str
    chat_template: str | None
    bos_text: str
    eos_text: str
    size_bytes: int

    @property
    def n_vocab(self) -> int: ...
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]: ...
    def tokenize_rendered(self, text: str) -> list[int]: ...
    def detokenize(self, tokens: list[int]) -> str: ...
    @property
    def fim_tokens(self) -> dict[str, int]: ...
    @property
    def bos_token(self) -> int | None: ...
    def token_bytes(self, token: int) -> bytes: ...
    def check_tokens(self, tokens: list[int], param: str = "prompt") -> None: ...
    def make_sampler(self, params: SamplingParams) -> Any: ...
    def warm_up(self) -> None: ...
    def set_adapters(self, adapters: Adapters) -> None: ...
    def load_adapter(self, path: str) -> None: ...
    def close(self) -> None: ...
    # images (vision generators; media_marker is None without a projector)
    @property
    def media_marker(self) -> str | None: ...
    def tokenize_multimodal(self, text: str, images: list[Image]) -> tuple[list[int], dict[int, Any]]: ...


class EncoderRuntime(Protocol):
    """Anything a dynamic batcher can drive: one forward pass over a batch of prepared items."""

    max_batch_tokens: int | None   # a cap of the model's own on the padded tokens of one batch

    def run_batch(self, items: Sequence[Any]) -> Sequence[Any]: ...
    def close(self) -> None: ...


class EmbedderRuntime(EncoderRuntime, Protocol):
    sparse: bool
    dims: int
    max_length: int

    def prefix(self, task: str | None) -> str: ...
    def prepare(self, texts: Sequence[str], task: str | None = None) -> Sequence[Any]: ...
    def prepare_ids(self, ids: Sequence[int]) -> Any: ...


class ImageEmbedderRuntime(EmbedderRuntime, Protocol):
    """A CLIP-style dual encoder: texts and images into one space (runtimes/onnx/clip.py)."""

    def prepare_image(self, rgb: Any) -> Any: ...


class ReaderRuntime(EncoderRuntime, Protocol):
    """OCR / document understanding (runtimes/ocr, runtimes/onnx/vision_seq2seq.py): batches
    of ReadItem -> ReadOutput. `check` refuses what the model cannot do (a prompt) up front."""

    def check(self, item: Any) -> None: ...


class RerankerRuntime(EncoderRuntime, Protocol):
    def prepare(self, query: str, documents: list[str]) -> list[Any]: ...
    def combine(self, outputs: list[Any], n_documents: int) -> list[float]: ...


class ImageRerankerRuntime(EncoderRuntime, Protocol):
    """A late-interaction image reranker (ColPali, runtimes/onnx/colvision.py): a query's token
    vectors and each page image's vectors from one batcher, scored by MaxSim."""

    def prepare_query(self, query: str) -> Any: ...
    def prepare_image(self, rgb: Any) -> Any: ...
    def score(self, query: Any, pages: Sequence[Any]) -> float: ...


class ChunkerRuntime(EncoderRuntime, Protocol):
    def windows(self, text: str) -> list[Any]: ...


class PredictorRuntime(Protocol):
    name: str
    size_bytes: int

    @property
    def num_features(self) -> int: ...
    @property
    def task(self) -> str: ...
    def predict(self, x: Any) -> Any: ...


# ---- handles --------------------------------------------------------------------------------
R_co = TypeVar("R_co", covariant=True)
S_co = TypeVar("S_co", covariant=True)


class Handle(Protocol[R_co, S_co]):
    """What the registry holds for a loaded model of any kind: the leaf `runtime`, the
    `scheduler` that owns its worker thread (None for a model run on a thread per request),
    `size_bytes` (estimated resident size), `stats` (the scheduler's own counters) and
    `close()`, which stops the scheduler before the runtime's native state is freed. Every
    handle class below has these five names and no others for them (the per-kind aliases
    backend, engine, encoder, batcher, predictor, queue, rewriter are gone)."""

    @property
    def runtime(self) -> R_co: ...
    @property
    def scheduler(self) -> S_co: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def stats(self) -> Any: ...
    def close(self) -> None: ...


@dataclass(eq=False)
class GeneratorHandle:
    """A generator and its continuous-batching engine. `lora` is the adapter in force,
    recorded by the worker in the same call that applies it, so a switch whose requester
    was cancelled can never leave the name and the weights disagreeing."""

    runtime: GeneratorRuntime
    scheduler: GenerationEngine
    lora: str | None = None
    # loads a draft model (spec -> backend sized like this one) for speculation; set by kinds/generator.py
    make_draft: Callable[[Any], Any] | None = None

    @property
    def size_bytes(self) -> int:
        return int(self.runtime.size_bytes)

    @property
    def stats(self) -> Any:
        return self.scheduler.stats

    def warm_up(self) -> None:
        """Block until one warm-up decode has run on the engine's worker thread."""
        self.scheduler.call_when_idle(self.runtime.warm_up).result()

    async def set_lora(self, name: str | None, adapters: Adapters) -> None:
        """Make `adapters` ((path, scale) pairs; () the base weights) the default set of the
        requests that bring none, once those already submitted have finished; later ones wait
        for it (GenAIServer's /set_lora). Requests with their own set neither wait nor are waited for. `name` is what the catalog shows.
        Shielded: the switch completes even if the caller is cancelled. The KV cache stays:
        the engine keys every cached prefix by the adapter set it was computed with."""
        def apply() -> None:
            self.scheduler.default_adapters = adapters
            self.lora = name if adapters else None

        await asyncio.shield(asyncio.wrap_future(self.scheduler.call_when_idle(apply, reset_cache=False, default_only=True)))

    def close(self) -> None:
        if self.scheduler.close():
            self.scheduler.drafters.close()
            self.runtime.close()
        else:  # a step is still running native code: leaking is safe, freeing under it is not
            log.error("generation worker of %s did not stop; its native memory is not freed", self.runtime.name)


E = TypeVar("E", bound=EncoderRuntime)
class _Closes(Protocol):
    def close(self) -> None: ...


class _Worker(_Closes, Protocol):
    @property
    def stats(self) -> Any: ...


R = TypeVar("R", bound=_Closes)
S = TypeVar("S", bound=_Worker)


@dataclass(eq=False)
class _Queued(Generic[R, S]):
    """What the queued handles share: a runtime, the scheduler that owns its worker thread,
    and closing in that order (a running batch finishes, waiting work fails with ModelUnloaded,
    then the native state goes)."""

    runtime: R
    scheduler: S
    size_bytes: int = 0

    @property
    def stats(self) -> Any:
        return self.scheduler.stats

    def close(self) -> None:
        self.scheduler.close()
        self.runtime.close()


@dataclass(eq=False)
class EncoderHandle(_Queued[E, Batcher]):
    """An encoder (embedder, reranker, chunker, ...) and the dynamic batcher that owns its
    worker thread; every forward pass goes through that `scheduler`."""



@dataclass(eq=False)
class PredictorHandle:
    """A tabular predictor: pure numpy, run on a thread per request, no scheduler of its own."""

    runtime: PredictorRuntime
    size_bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    scheduler: None = None

    @property
    def stats(self) -> Any:
        return None

    def close(self) -> None:
        pass


@dataclass(eq=False)
class TranscriberHandle(_Queued[SpeechRuntime, SpeechQueue]):
    """A speech model (Whisper on CTranslate2, CTC on onnxruntime) and the queue that owns its
    worker thread and batches the windows of concurrent requests."""


@dataclass(eq=False)
class SpeakerHandle(_Queued[SpeakerRuntime, SynthesisQueue]):
    """A text-to-speech voice (Piper on onnxruntime) and the queue that owns its worker thread
    and synthesises the sentences of concurrent requests in batches."""


@dataclass(eq=False)
class RewriterHandle(_Queued["Rewriter", "Seq2SeqScheduler | Batcher"]):
    """A seq2seq rewriter and its scheduler (Seq2SeqScheduler for ONNX, a Batcher of
    translate_batch calls for CTranslate2: `ct2`)."""

    ct2: bool = False

    async def generate(self, inputs: list[tuple[int, ...]], params: list["DecodeParams"]) -> list[Any]:
        """Per input: its generated token lists (best first), or its exception."""
        if not self.ct2:
            return await cast("Seq2SeqScheduler", self.scheduler).submit(inputs, params)
        costs = [len(x) * p.num_beams for x, p in zip(inputs, params)]
        gone = [threading.Event() for _ in inputs]  # set when the request leaves: decoding stops
        try:
            return await cast("Batcher", self.scheduler).submit_each(list(zip(inputs, params, gone)), costs)
        except asyncio.CancelledError:
            for g in gone:
                g.set()
            raise


AnyHandle = (GeneratorHandle | EncoderHandle[Any] | PredictorHandle | TranscriberHandle | RewriterHandle
             | SpeakerHandle)
