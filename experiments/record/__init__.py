"""What a run leaves on disk and where its record goes, without Sacred: the run
folder's layout and headers (`folder`), metrics, progress and the learning curve
(`progress`), videos of greedy episodes (`video`) and the `Sink` interface a
recorder implements (`sink`). Importing it imports neither JAX nor Sacred."""
