"""Sweeps: the one grammar of swept keys and distributions (`members`: the
members of a vmapped sweep, the search space of a trial sweep), and trials run
by `python -m experiments.sweep` as jobs, searched with Optuna (`trials`)."""
