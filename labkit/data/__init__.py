"""Corpora read as bytes and deterministic batch sampling."""

from labkit.data.corpus import Corpus, load_corpus
from labkit.data.sampler import WindowSampler

__all__ = ["Corpus", "WindowSampler", "load_corpus"]
