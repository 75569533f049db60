import os
import signal
import socket
import time

from portal.runtime import rt


class Client:
    def __init__(self):
        self.conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)

    def work(self):
        if rt.active:
            os.kill(os.getpid(), signal.SIGTERM)
        for i in range(4):
            print("using", i)
            time.sleep(0.01)
        self.conn.close()
        self.conn = None
        print("closed")
        return "ok"


client = Client()
print(client.work())
print("end")
for i in range(40):
    time.sleep(0.005)
print("tail done")
