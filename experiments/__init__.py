"""Sacred experiments around the zoo: `python -m experiments.run with agent=dqn`.

From Python, `experiments.tuned(agent, env)` gives the tuned hyperparameters and
run settings the CLI trains with (importing this package imports neither JAX
nor Sacred).
"""

from experiments._tuned import Tuned as Tuned, pairs as pairs, tuned as tuned
