"""A user module in sqlparse's shape: a class attribute lock guarding a lazily made default
instance, and a module global that is a bound method of a struct.Struct (pyflate's int2byte)."""

import struct
import threading

int2byte = struct.Struct(">B").pack


class Lexer:
    _lock = threading.Lock()
    _default = None

    def __init__(self):
        self.made = 0

    @classmethod
    def get_default_instance(cls):
        with cls._lock:
            if cls._default is None:
                cls._default = cls()
            cls._default.made += 1
        return cls._default
