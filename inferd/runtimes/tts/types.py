"""What a voice runtime takes and gives: utterances ready for the graph, float audio back."""

from __future__ import annotations

from dataclasses import dataclass

# OpenAI's voice names (audio.speech.create's `voice`). A voice model serves them as aliases
# of its own speakers, in order (the n-th name is the n-th speaker, cycling), so a client
# written for OpenAI speaks with any model; the model's own speaker names work as well.
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse",
                 "marin", "cedar")


@dataclass(frozen=True)
class Utterance:
    """One sentence as the graph takes it. `key`: what every utterance of one batch must share
    (Piper's `scales` are one input for the whole batch); `cost`: its padded length."""

    ids: tuple[int, ...]
    speaker: int | None
    scales: tuple[float, float, float]   # Piper: noise_scale, length_scale, noise_w
    chars: int                           # characters of text it speaks (usage)

    @property
    def key(self) -> tuple[float, ...]:
        return self.scales

    @property
    def cost(self) -> int:
        return len(self.ids)


def speaker_index(voice: str | None, speakers: dict[str, int], default: str) -> int | None:
    """The speaker id `voice` names (its own name or an OpenAI alias), None if it names none.
    A single-speaker model has the one speaker 0 under its `default` name."""
    table = speakers or {default: 0}
    if voice is None or voice == default or voice in table:
        return table.get(voice or default, 0)
    if voice in OPENAI_VOICES:
        ids = sorted(table.values())
        return ids[OPENAI_VOICES.index(voice) % len(ids)]
    return None
