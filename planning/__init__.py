"""The planner, run at synth and on a laptop: memory, step time, the layout and batch search, and its CLI."""
