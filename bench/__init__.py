"""bkledger benchmarks: every figure is printed as a ratio to a limit measured in the same run.

`python -m bench.run` runs the registered benchmarks (`bench.run.BENCHMARKS`) and prints one table;
nothing here asserts on a number. A benchmark is a function `(Context) -> list[Row]`.
"""
