"""Driver (ours) for pyaes: encrypts and decrypts seeded random data in each of its modes of
operation through its streaming BlockFeeder API, fed in chunks of random sizes, and prints the
ciphertexts' digests."""

import argparse
import hashlib
import random

import pyaes
from pyaes.blockfeeder import Decrypter, Encrypter

parser = argparse.ArgumentParser()
parser.add_argument("--size", type=int, default=60000)
parser.add_argument("--seed", type=int, default=3)
args = parser.parse_args()

rng = random.Random(args.seed)
key = bytes(rng.randrange(256) for _ in range(32))
iv = bytes(rng.randrange(256) for _ in range(16))
plaintext = bytes(rng.randrange(256) for _ in range(args.size))


def make(mode_name):
    mode = pyaes.AESModesOfOperation[mode_name]
    if mode_name == "ctr":
        return mode(key, counter=pyaes.Counter(initial_value=12345))
    if mode_name == "ecb":
        return mode(key)
    return mode(key, iv)


def run(feeder, data):
    out = b""
    pos = 0
    while pos < len(data):
        n = rng.randint(1, 2048)
        out += feeder.feed(data[pos : pos + n])
        pos += n
    return out + feeder.feed()


for mode_name in sorted(pyaes.AESModesOfOperation):
    ciphertext = run(Encrypter(make(mode_name)), plaintext)
    print(f"{mode_name}: {len(ciphertext)} bytes sha256={hashlib.sha256(ciphertext).hexdigest()}",
          flush=True)
    decrypted = run(Decrypter(make(mode_name)), ciphertext)
    print(f"{mode_name}: round trip {'ok' if decrypted == plaintext else 'WRONG'}", flush=True)
