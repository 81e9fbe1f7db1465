"""tracr's histogram: at each position, how many tokens equal this one.
flatformer compile examples/rasp/hist.py --vocab 1,2,3 --max-len 5 --out runs/hist"""

from flatformer.rasp import library

program = library.make_hist()
