"""Sacred experiments around the zoo: `python -m experiments.run with agent=dqn`."""
