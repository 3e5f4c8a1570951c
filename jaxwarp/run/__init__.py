"""The run shell around the algorithm: what ``jaxwarp train`` does on the host.

`loop` (`train_run`: the program in chunks, progress, lock, Ctrl-C, stop
rules, summary), `checkpoint` (Orbax checkpoints and config.yaml), `metrics`
(metrics.jsonl / .csv / TensorBoard), `plot` (the learning curve),
`distributed` (multi-process start) and `evaluate` (a saved run played
against random play; its GIF). The shell imports the algorithm
(`jaxwarp.train`) and the models, never the reverse.
"""
