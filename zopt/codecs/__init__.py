"""Codecs: ``bytes`` for zopt's data types, ``packbits``, ``reshape``, ``conditional`` (alias
``optional``), ``shuffle``."""

from zopt.codecs.bytes import BytesCodec
from zopt.codecs.conditional import ConditionalCodec, OptionalAliasCodec
from zopt.codecs.packbits import PackBitsCodec
from zopt.codecs.reshape import ReshapeCodec
from zopt.codecs.shuffle import ShuffleCodec

__all__ = ["BytesCodec", "ConditionalCodec", "OptionalAliasCodec", "PackBitsCodec", "ReshapeCodec", "ShuffleCodec"]
