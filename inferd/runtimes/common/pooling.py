"""Pooling of token vectors into one vector per input, normalisation, SPLADE top-k, MaxSim.
Pure numpy on arrays the session returned."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

POOLINGS = ("mean", "cls", "last")


@dataclass(frozen=True)
class SparseVector:
    indices: np.ndarray  # int64, ascending
    values: np.ndarray   # float32, > 0


def pool(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    """hidden [B,S,E], mask [B,S] -> [B,E]."""
    if mode == "cls":
        return hidden[:, 0]
    if mode == "last":  # the last real token of each row (right padding)
        last = np.maximum(mask.sum(axis=1) - 1, 0)
        return hidden[np.arange(hidden.shape[0]), last]
    m = mask[..., None].astype(hidden.dtype)
    return (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)


def l2_normalize(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norm, 1e-12)


def truncate_dims(v: np.ndarray, dims: int) -> np.ndarray:
    """Matryoshka-style: keep the first `dims` values and renormalise."""
    return l2_normalize(v[..., :dims])


def top_k_sparse(row: np.ndarray, k: int) -> SparseVector:
    """The k largest positive weights of one SPLADE vector, indices ascending."""
    nz = np.flatnonzero(row > 0)
    if k and nz.size > k:
        nz = nz[np.argpartition(row[nz], -k)[-k:]]
    nz = np.sort(nz)
    return SparseVector(nz.astype(np.int64), row[nz].astype(np.float32))


def maxsim(query: np.ndarray, doc: np.ndarray) -> float:
    """ColBERT late interaction: for each query token the best-matching document token,
    summed. Both [tokens, dim], rows already L2-normalised."""
    return float((query @ doc.T).max(axis=1).sum())
