"""Codecs: ``bytes`` for zopt's data types, ``packbits``, ``reshape``, ``conditional`` (alias
``optional``), ``shuffle``, ``scale_offset``, ``cast_value``, ``zopt.lorenzo``."""

from zopt.codecs.bytes import BytesCodec
from zopt.codecs.cast_value import CastValueCodec
from zopt.codecs.conditional import ConditionalCodec, OptionalAliasCodec
from zopt.codecs.lorenzo import LorenzoCodec
from zopt.codecs.packbits import PackBitsCodec
from zopt.codecs.reshape import ReshapeCodec
from zopt.codecs.scale_offset import ScaleOffsetCodec
from zopt.codecs.shuffle import ShuffleCodec

__all__ = [
    "BytesCodec",
    "CastValueCodec",
    "ConditionalCodec",
    "LorenzoCodec",
    "OptionalAliasCodec",
    "PackBitsCodec",
    "ReshapeCodec",
    "ScaleOffsetCodec",
    "ShuffleCodec",
]
