"""Phonemisation with espeak-ng, offline: the shared library and its data come from the PyPI
package `espeakng-loader` (espeak-ng is GPL-3; it is an optional extra, `inferd[tts]`),
called through ctypes.

espeak-ng keeps one global state (the voice, its dictionaries, a static output buffer that
espeak_TextToPhonemes returns), so every call goes through one process-wide lock: setting
the voice and reading the phonemes of a clause happen under it together."""

from __future__ import annotations

import ctypes
import re
import threading
import unicodedata

from inferd.errors import ModelLoadFailed

_AUDIO_OUTPUT_SYNCHRONOUS = 2   # espeak_AUDIO_OUTPUT: we only read phonemes, nothing is played
_INITIALIZE_DONT_EXIT = 0x8000  # a missing data folder returns an error instead of exit()
_CHARS_UTF8 = 1
_PHONEMES_IPA = 0x02            # phonememode bit 1: IPA (UTF-8) instead of espeak's ASCII names
_EE_OK = 0
# espeak marks a switch to another language's rules inside a clause: "(fr)" ... "(en)"
_LANGUAGE_FLAG = re.compile(r"\([a-z-]+\)")

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_voice: str | None = None


def _library() -> ctypes.CDLL:
    """espeak-ng, loaded and initialised once per process (under the lock)."""
    global _lib
    if _lib is not None:
        return _lib
    try:
        import espeakng_loader
    except ImportError:
        raise ModelLoadFailed("text to speech needs espeak-ng: pip install 'inferd[tts]' "
                              "(espeakng-loader, GPL-3)") from None
    lib = ctypes.CDLL(espeakng_loader.get_library_path())
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_Initialize.restype = ctypes.c_int
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetVoiceByName.restype = ctypes.c_int
    lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
    lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
    rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, espeakng_loader.get_data_path().encode(),
                                 _INITIALIZE_DONT_EXIT)
    if rate <= 0:
        raise ModelLoadFailed(f"espeak-ng did not initialise (data at {espeakng_loader.get_data_path()})")
    _lib = lib
    return lib


def check_voice(voice: str) -> None:
    """Fail at load, not at the first request, when espeak has no such voice."""
    with _lock:
        _set_voice(_library(), voice)


def _set_voice(lib: ctypes.CDLL, voice: str) -> None:
    global _voice
    if voice == _voice:
        return
    if lib.espeak_SetVoiceByName(voice.encode()) != _EE_OK:
        raise ModelLoadFailed(f"espeak-ng has no voice '{voice}'")
    _voice = voice


def phonemize(voice: str, texts: list[str]) -> list[str]:
    """IPA phonemes of each text (one clause each, no punctuation kept), NFD-decomposed as the
    voices' phoneme_id_map expects (a stress mark or a combining diacritic is its own symbol).
    espeak may cut a text into several clauses of its own; their phonemes are joined by a space."""
    out = []
    with _lock:
        lib = _library()
        _set_voice(lib, voice)
        for text in texts:
            buf = ctypes.create_string_buffer(text.encode("utf-8"))
            ptr = ctypes.c_void_p(ctypes.addressof(buf))
            parts = []
            while ptr.value:  # espeak moves the pointer past each clause it read; NULL at the end
                got = lib.espeak_TextToPhonemes(ctypes.byref(ptr), _CHARS_UTF8, _PHONEMES_IPA)
                if got:
                    parts.append(got.decode("utf-8", "replace"))
            out.append(unicodedata.normalize("NFD", _LANGUAGE_FLAG.sub("", " ".join(p.strip() for p in parts))))
    return out
