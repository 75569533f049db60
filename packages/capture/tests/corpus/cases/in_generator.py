import os
import signal
import time

from portal.runtime import rt


def numbers(n):
    for i in range(n):
        if i == 1 and rt.active:
            os.kill(os.getpid(), signal.SIGTERM)
        yield i * 10


total = 0
for value in numbers(4):
    total += value
    print("got", value)
print("total", total)
print("end")
for i in range(40):
    time.sleep(0.005)
print("tail done")
