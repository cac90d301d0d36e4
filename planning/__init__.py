"""The planner: what a deployment will do (memory, step time, the layout and batch search), run at synth and on a laptop."""
