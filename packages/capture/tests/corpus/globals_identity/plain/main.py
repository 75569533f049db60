"""A word-language-model training script's shape, without torch (globals identity test).

``import multiprocessing`` does what ``import torch`` does to ``sys.modules``: it registers the
script's module a second time, as ``__mp_main__``. ``train()`` reads the globals ``epoch``,
``lr``, ``model`` (which shadows the user module ``model``), ``corpus`` and ``args``, which the
module-level loop assigns; the script pauses itself (SIGTERM) inside ``train()`` at fixed
batches, twice in one call (the second time in the resumed frame), and checks after every
report that each function of the script and of its modules shares its module's namespace.
"""

import argparse
import functools
import multiprocessing  # noqa: F401
import os
import signal
import sys

import data
import identity
import model

from portal.runtime import rt

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=20.0)
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--bptt", type=int, default=10)
args = parser.parse_args()

PAUSE_AT = {(1, 3), (1, 7), (2, 5), (3, 0)}  # (epoch, batch) where train() pauses

corpus = data.Corpus()
ntokens = len(corpus.dictionary)
model = model.RNNModel(ntokens, 4)


def report(where):
    bad = identity.globals_problems(
        ["__main__", "data", "model", "identity"], sys._getframe(1).f_globals
    )
    print("identity", where, "ok" if not bad else "BROKEN " + " ".join(bad), flush=True)


def logged(func):
    @functools.wraps(func)
    def wrapper(*a):
        result = func(*a)
        print("  logged", func.__name__, round(result, 4), flush=True)
        return result

    return wrapper


def repackage_hidden(h):
    return [round(v, 6) for v in h]


def get_batch(source, i):
    seq_len = min(args.bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len]


@logged
def evaluate(data_source):
    model.eval()
    total = 0.0
    hidden = model.init_hidden()
    for i in range(0, len(data_source) - 1, args.bptt):
        inputs, targets = get_batch(data_source, i)
        for tok, tgt in zip(inputs, targets, strict=True):
            hidden = model.forward(tok, hidden)
            total += abs(sum(hidden) - tgt / ntokens)
        hidden = repackage_hidden(hidden)
    return total / len(data_source)


def train():
    model.train()
    total_loss = 0.0
    hidden = model.init_hidden()
    for batch, i in enumerate(range(0, len(corpus.train) - 1, args.bptt)):
        if rt.active and (epoch, batch) in PAUSE_AT:
            os.kill(os.getpid(), signal.SIGTERM)  # pauses at a line below
        inputs, targets = get_batch(corpus.train, i)
        hidden = repackage_hidden(hidden)
        for tok, tgt in zip(inputs, targets, strict=True):
            hidden = model.forward(tok, hidden)
            total_loss += abs(sum(hidden) - tgt / ntokens) * lr / 20.0
        if batch % 4 == 0:
            print(f"| epoch {epoch} | batch {batch} | lr {lr:.3f} | loss {total_loss:.4f}")
            print("  train sees the module's globals:", train.__globals__ is globals())
            report("in train")
            total_loss = 0.0


lr = args.lr
best_val_loss = None

try:
    for epoch in range(1, args.epochs + 1):
        train()
        val_loss = evaluate(corpus.valid)
        print(f"| end of epoch {epoch} | valid loss {val_loss:.4f}", flush=True)
        report("at module level")
        if not best_val_loss or val_loss < best_val_loss:
            best_val_loss = val_loss
        else:
            lr /= 4.0
except KeyboardInterrupt:
    print("Exiting from training early")

print("final epoch", epoch, "lr", lr)
