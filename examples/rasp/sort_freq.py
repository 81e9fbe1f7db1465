"""The tokens sorted by frequency, most frequent first (tracr's library program sort_freq).

flatformer compile examples/rasp/sort_freq.py --vocab 1,2,3 --max-len 5 --out runs/sort-freq
"""

from flatformer.rasp import library

program = library.make_sort_freq(max_seq_len=5)
