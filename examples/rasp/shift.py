"""Each position reads the token two places later; nothing arrives at the last two, so the
program's value there is None (Aggregate's default), and so is the compiled model's.

    flatformer compile examples/rasp/shift.py --vocab 0,1,2,3 --max-len 4 --out runs/shift
"""

from flatformer import rasp

later = rasp.Select(rasp.indices, rasp.indices, lambda key, query: key == query + 2)
program = rasp.Aggregate(later, rasp.tokens).named("shift")
