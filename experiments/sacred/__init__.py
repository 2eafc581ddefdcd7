"""Everything that imports Sacred: the experiment and its observers
(`experiment`, `observers`), the `SacredSink` training records into (`sink`),
stale-run detection (`liveness`) and MongoDB (`mongo`). No module outside this
package imports Sacred."""
