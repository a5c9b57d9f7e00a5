"""Codecs: ``bytes`` for zopt's data types, ``conditional`` (alias ``optional``), ``shuffle``."""

from zopt.codecs.bytes import BytesCodec
from zopt.codecs.conditional import ConditionalCodec, OptionalAliasCodec
from zopt.codecs.shuffle import ShuffleCodec

__all__ = ["BytesCodec", "ConditionalCodec", "OptionalAliasCodec", "ShuffleCodec"]
