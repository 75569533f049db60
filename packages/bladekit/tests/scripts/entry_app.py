"""An app with a local entrypoint, as a Modal user writes one: ``bladekit run entry_app.py``
calls ``main`` here, and ``main`` fans out to the app's function, which runs in containers."""

import bladekit

app = bladekit.app("entry")


@app.function()
def square(x: int) -> int:
    return x * x


@app.local_entrypoint()
def main(n: int = 3, fail: bool = False) -> int:
    squares = list(square.map(range(n)))
    print("squares", squares, flush=True)
    if fail:
        raise ValueError(f"stopped at n={n}")
    return sum(squares)
