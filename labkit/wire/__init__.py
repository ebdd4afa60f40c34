"""Wire formats for tensors crossing stage boundaries: codecs with exact byte counts, and settings."""

from labkit.wire.codecs import CODECS, Codec, CodecUnavailableError, Encoded, get_codec
from labkit.config import BOUNDARIES, CompressionConfig

__all__ = ["BOUNDARIES", "CODECS", "Codec", "CodecUnavailableError", "CompressionConfig", "Encoded", "get_codec"]
