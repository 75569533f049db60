"""A user module next to the scripts: its globals travel by value."""
import time

counter = 0
history = []


class Accumulator:
    def __init__(self, start):
        self.value = start

    def add(self, x):
        global counter
        counter += 1
        time.sleep(0.002)
        self.value += x
        history.append(x)
        return self.value


def make_scaler(k):
    def scale(v):
        return v * k
    return scale


def check_globals():
    """Print which functions of the corpus do not see their own module's namespace (none must:
    a resumed function reading a stale copy of its globals would compute wrong results)."""
    import gc
    import os
    import sys
    import types

    here = os.path.dirname(os.path.abspath(__file__))
    wrong = set()
    for obj in gc.get_objects():
        if not isinstance(obj, types.FunctionType):
            continue
        filename = obj.__code__.co_filename
        if filename.startswith("<") or os.path.dirname(os.path.abspath(filename)) != here:
            continue
        if obj.__code__.co_name == "<module>":  # the interpreter's own wrapper of a module's code
            continue
        module = sys.modules.get(obj.__module__)
        if module is None or obj.__globals__ is not module.__dict__:
            wrong.add(f"{obj.__module__}.{obj.__qualname__}")
    print("functions not seeing their module's globals:", sorted(wrong))
