"""Changes each carried setting, a step at a time, and prints it after each step: a resumed run
must print what an uninterrupted one prints."""
import decimal
import logging
import os
import sys
import time
import warnings

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
log_path = os.path.join(here, "ext_settings.log")
console = logging.StreamHandler(sys.stdout)
console.setFormatter(logging.Formatter("LOG %(name)s %(levelname)s %(message)s"))


def show(step):
    time.sleep(0.01)
    ctx = decimal.getcontext()
    print(
        step,
        os.getcwd() == here or os.path.relpath(os.getcwd(), here),
        [p for p in sys.path if p.startswith("/ext-")],
        os.environ.get("EXT_SET"),
        "EXT_DEL" in os.environ,
        [(f[0], f[2].__name__) for f in warnings.filters[:2]],
        ctx.prec,
        ctx.rounding,
        decimal.Decimal(1) / decimal.Decimal(7),
        sys.getrecursionlimit(),
        np.array([1 / 3, 2 / 3, 1e-9]),
        logging.getLogger("app").level,
        logging.getLogger("app.db").getEffectiveLevel(),
        sep=" | ",
    )
    sys.stdout.flush()
    logging.getLogger("app").info("step %s", step)
    logging.getLogger("app.db").warning("db step %s", step)


os.environ["EXT_DEL"] = "x"  # deleted, then set again, by the program below
for rnd in range(3):
    os.makedirs(os.path.join(here, f"sub{rnd}"), exist_ok=True)
    show(f"{rnd}.start")
    os.chdir(os.path.join(here, f"sub{rnd}"))
    show(f"{rnd}.cwd")
    sys.path.insert(0, f"/ext-front-{rnd}")
    sys.path.append(f"/ext-back-{rnd}")
    show(f"{rnd}.path")
    os.environ["EXT_SET"] = f"value-{rnd}"
    os.environ.pop("EXT_DEL", None)
    show(f"{rnd}.environ")
    warnings.simplefilter("ignore", DeprecationWarning if rnd % 2 else UserWarning)
    show(f"{rnd}.warnings")
    decimal.getcontext().prec = 5 + rnd
    decimal.getcontext().rounding = decimal.ROUND_DOWN if rnd % 2 else decimal.ROUND_UP
    show(f"{rnd}.decimal")
    sys.setrecursionlimit(2000 + rnd)
    show(f"{rnd}.recursion")
    np.set_printoptions(precision=2 + rnd, suppress=bool(rnd % 2))
    show(f"{rnd}.numpy")
    if rnd == 0:
        logging.getLogger("app").addHandler(console)
        logging.getLogger("app").setLevel(logging.INFO)
        file_handler = logging.FileHandler(log_path, mode="w")
        file_handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
        logging.getLogger("app").addHandler(file_handler)
    else:
        logging.getLogger("app.db").setLevel(logging.ERROR if rnd == 1 else logging.WARNING)
    show(f"{rnd}.logging")
    os.environ["EXT_DEL"] = "back"
logging.getLogger("app").removeHandler(file_handler)
file_handler.close()
with open(log_path) as fh:
    lines = fh.read().splitlines()
print("log file", len(lines), lines[:2], lines[-2:])
print("done")
