"""A toy language model (user module ``model``): plain Python, no library."""

import functools


def scaled(factor):
    def decorate(method):
        @functools.wraps(method)
        def wrapper(self, *args):
            return [v * factor for v in method(self, *args)]

        return wrapper

    return decorate


class RNNModel:
    def __init__(self, ntoken, nhid):
        self.ntoken = ntoken
        self.nhid = nhid
        self.weights = [((i * 7919) % 97) / 97.0 - 0.5 for i in range(ntoken * nhid)]
        self.training = True

    @staticmethod
    def squash(x):
        return max(-1.0, min(1.0, x))

    @classmethod
    def small(cls, ntoken):
        return cls(ntoken, 4)

    @property
    def size(self):
        return len(self.weights)

    def train(self):
        self.training = True

    def eval(self):
        self.training = False

    def init_hidden(self):
        return [0.0] * self.nhid

    @scaled(0.5)
    def forward(self, token, hidden):
        row = self.weights[token * self.nhid : (token + 1) * self.nhid]
        return [self.squash(h * 0.9 + w) for h, w in zip(hidden, row, strict=True)]

    def parameters(self):
        return range(len(self.weights))
