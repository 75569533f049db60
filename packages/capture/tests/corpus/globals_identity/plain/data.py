"""A tiny corpus (user module ``data``)."""

WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "off"]


class Dictionary:
    def __init__(self):
        self.word2idx = {}
        self.idx2word = []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


def make_text(seed, n):
    out, x = [], seed
    for _ in range(n):
        x = (x * 1103515245 + 12345) % (1 << 31)
        out.append(WORDS[x % len(WORDS)])
    return out


class Corpus:
    def __init__(self, n=400):
        self.dictionary = Dictionary()
        self.train = self.tokenize(make_text(1, n))
        self.valid = self.tokenize(make_text(2, n // 4))

    def tokenize(self, words):
        return [self.dictionary.add_word(w) for w in [*words, "<eos>"]]
