"""tracr's reverse: each position reads the token at (length - index - 1).
flatformer compile examples/rasp/reverse.py --vocab 1,2,3 --max-len 5 --out runs/reverse"""

from flatformer import rasp
from flatformer.rasp import library

program = library.make_reverse(rasp.tokens)
