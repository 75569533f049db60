"""A word-language-model training script's shape, with torch (globals identity test).

``import torch`` registers the script's module a second time, as ``sys.modules["__mp_main__"]``
(it imports multiprocessing). ``train()`` reads the globals ``epoch``, ``lr``, ``model`` (which
shadows the user module ``model``), ``corpus`` and ``args``, which the module-level loop
assigns; the script pauses itself (SIGTERM) inside ``train()`` at fixed batches, twice in one
call (the second time in the resumed frame), and checks after every report that each function
of the script and of its modules shares its module's namespace.
"""

import argparse
import os
import signal
import sys

import data
import identity
import model
import torch
import torch.nn as nn

from portal.runtime import rt

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=20.0)
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--bptt", type=int, default=8)
parser.add_argument("--batch_size", type=int, default=4)
parser.add_argument("--save", type=str, default="model.pt")
args = parser.parse_args()

PAUSE_AT = {(1, 3), (1, 7), (2, 5), (3, 0)}  # (epoch, batch) where train() pauses

torch.manual_seed(1111)
corpus = data.Corpus()


def batchify(source, bsz):
    nbatch = source.size(0) // bsz
    return source.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()


train_data = batchify(corpus.train, args.batch_size)
val_data = batchify(corpus.valid, 4)
ntokens = len(corpus.dictionary)
model = model.RNNModel(ntokens, 8, 8, 2, 0.2)
criterion = nn.NLLLoss()


def report(where):
    modules = ["__main__", "data", "model", "identity"]
    bad = identity.globals_problems(modules, sys._getframe(1).f_globals)
    print("identity", where, "ok" if not bad else "BROKEN " + " ".join(bad), flush=True)


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i):
    seq_len = min(args.bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


@torch.no_grad()
def evaluate(data_source):
    model.eval()
    total_loss = 0.0
    hidden = model.init_hidden(4)
    for i in range(0, data_source.size(0) - 1, args.bptt):
        inputs, targets = get_batch(data_source, i)
        output, hidden = model(inputs, hidden)
        hidden = repackage_hidden(hidden)
        total_loss += len(inputs) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def save_model():
    # In a function: a closed file left in a global would hold every later pause.
    with open(args.save, "wb") as f:
        torch.save(model, f)


def train():
    model.train()
    total_loss = 0.0
    hidden = model.init_hidden(args.batch_size)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        if rt.active and (epoch, batch) in PAUSE_AT:
            os.kill(os.getpid(), signal.SIGTERM)  # pauses at a line below
        inputs, targets = get_batch(train_data, i)
        model.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = model(inputs, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        total_loss += loss.item()
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
        with torch.no_grad():
            val_loss = evaluate(val_data)
        print(f"| end of epoch {epoch} | valid loss {val_loss:.4f}", flush=True)
        report("at module level")
        if not best_val_loss or val_loss < best_val_loss:
            save_model()
            best_val_loss = val_loss
        else:
            lr /= 4.0
except KeyboardInterrupt:
    print("Exiting from training early")

print("final epoch", epoch, "lr", lr)
