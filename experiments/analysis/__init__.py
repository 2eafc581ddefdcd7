"""Reading recorded runs, without JAX or Sacred: interquartile means and their
confidence intervals (`stats`), and the comparison `python -m experiments.plot`
draws (`compare`)."""
