"""The data layer: task sources (GSM8K, the embedded arithmetic and multiplication tasks, reasoning-gym, user
files) as rows of prompt, completion, ground_truth and question. `sources.load` reads one split; `formatting` is
the one prompt format. Kept empty so that the config layer can validate a reasoning-gym task without `datasets`.
"""
