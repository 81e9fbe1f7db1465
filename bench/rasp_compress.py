"""How far a compiled program squeezes: `flatformer compile --compress D` at the residual
stream's rank and below it, and how many of the program's outputs each width keeps.

    python bench/rasp_compress.py

Each program is compiled for inputs of up to 5 values; its stream's rank is that of every
residual activation over every input (the one-hot directions are linearly dependent, so it is
below d). At each width the map starts from the stream's top principal directions and is
trained by Adam (the steps below) on the logits' squared error; the share of inputs (every one
up to 5 values) on which the compressed model gives the program's value at every position is
the interpreter's check. CPU seconds of one core.
"""

from __future__ import annotations

import sys
import time

from common import record
from dictionary_compiled import CHOSEN, MAX_LEN, stream_rank
from rasp_library import PROGRAMS

from flatformer.rasp.compile import compile_rasp_to_model
from flatformer.rasp.compress import compress
from flatformer.rasp.run import domain
from flatformer.rasp.validate import validate

STEPS, BELOW = 200, (0, 1, 2)


def main() -> int:
    programs = {name: (program, vocab) for name, program, vocab, _ in PROGRAMS}
    with record(__file__, "Compiled programs compressed into superposition", markdown=True):
        print(__doc__.split("\n\n", 2)[2].strip() + f" Adam steps: {STEPS}.\n")
        print("| program | d | rank | D | positions kept | inputs kept | seconds |")
        print("|---|---|---|---|---|---|---|")
        for name in CHOSEN:
            program, vocab = programs[name]
            compiled = compile_rasp_to_model(program, vocab, MAX_LEN)
            batches = domain(compiled)[0]
            rank = stream_rank(compiled, batches)
            for below in BELOW:
                start = time.process_time()
                squeezed = compress(compiled, batches, rank - below, STEPS)
                seconds = time.process_time() - start
                check = validate(program, squeezed.compressed)
                kept = (check.checked - len(check.mismatches)) / check.checked
                print(
                    f"| {name} | {compiled.cfg.d_model} | {rank} | {rank - below} | "
                    f"{squeezed.accuracy:.1%} | {kept:.1%} | {seconds:.1f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
