"""Every reference program of the RASP library compiled, and its model checked against the
interpreter on every input up to its max_len: the counts, the model sizes, and the compile and
check times (process CPU seconds: one core).

    python bench/rasp_library.py
"""

from __future__ import annotations

import sys
import time

from common import record

from flatformer import rasp
from flatformer.rasp import library as lib
from flatformer.rasp.compile import compile_rasp_to_model
from flatformer.rasp.validate import validate

DIGITS, LETTERS, PARENS = [1, 2, 3], ["a", "b", "c"], ["(", ")"]

# (name, program, vocabulary, max_len)
PROGRAMS = [
    ("length", lib.make_length(), DIGITS, 7),
    ("reverse", lib.make_reverse(rasp.tokens), DIGITS, 7),
    ("hist", lib.make_hist(), DIGITS, 7),
    ("sort_unique", lib.make_sort_unique(rasp.tokens, rasp.tokens), DIGITS, 7),
    ("sort", lib.make_sort(rasp.tokens, rasp.tokens, max_seq_len=7, min_key=1), DIGITS, 7),
    ("sort_freq", lib.make_sort_freq(7), DIGITS, 7),
    ("frac_prevs", lib.make_frac_prevs(rasp.tokens == "x"), ["x", "y"], 10),
    ("pair_balance", lib.make_pair_balance(rasp.tokens, "(", ")"), PARENS, 10),
    ("shuffle_dyck", lib.make_shuffle_dyck(["()"]), PARENS, 10),
    ("shuffle_dyck2", lib.make_shuffle_dyck2(), ["(", ")", "{", "}"], 6),
    ("detect_pattern", lib.detect_pattern(rasp.tokens, "abc"), LETTERS, 7),
    ("count_less_freq", lib.make_count_less_freq(2), LETTERS, 7),
    ("count", lib.make_count(rasp.tokens, "a"), LETTERS, 7),
]


HEADER = (
    "| program | vocabulary | max_len | inputs checked | values | layers | heads | d_model "
    "| d_mlp | causal | parameters | compile ms | mismatches | check s |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> int:
    failures = 0
    with record(__file__, "Compiled RASP programs against the interpreter", markdown=True):
        print("Every input up to max_len over the vocabulary; the model's argmax at each")
        print("position against the program's value. Each program compiled twice: its value")
        print("sets observed on every input (the default at these sizes), and inferred from")
        print("the operations (tracr's way, used where inputs are too many to run). Times in")
        print("CPU seconds of one core.\n")
        print(HEADER)
        for name, program, vocab, max_len in PROGRAMS:
            for exact_limit, values in ((20_000, "observed"), (0, "inferred")):
                compiled = compile_rasp_to_model(program, vocab, max_len, exact_limit=exact_limit)
                start = time.process_time()
                result = validate(program, compiled)
                seconds = time.process_time() - start
                failures += not result.ok
                cfg = compiled.cfg
                print(
                    f"| {name} | {','.join(map(str, vocab))} | {max_len} | {result.checked:,} "
                    f"| {values} | {cfg.n_layers} | {cfg.n_heads} | {cfg.d_model} | {cfg.d_mlp} "
                    f"| {'yes' if cfg.causal else 'no'} | {cfg.n_params:,} "
                    f"| {1000 * compiled.seconds:.1f} | {len(result.mismatches)} | {seconds:.1f} |",
                    flush=True,
                )
    return failures


if __name__ == "__main__":
    sys.exit(main())
