"""accelerate's state made and then held by no object of the script's: its logging still needs
it after a resume (it asks PartialState's class-level shared dict)."""

import logging
import time

from accelerate import Accelerator
from accelerate.logging import get_logger

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
accelerator = Accelerator(cpu=True)
device = str(accelerator.device)
del accelerator  # no instance of accelerate's states is left in the program
logger = get_logger("job")
for step in range(40):
    print("step", step, flush=True)
    time.sleep(0.05)
logger.info("on %s, after the loop", device, main_process_only=True)
print("logged", flush=True)
