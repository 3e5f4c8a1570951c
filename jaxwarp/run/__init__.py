"""The run shell around the algorithm: what ``jaxwarp train`` does on the host.

`loop` (`train_run`: the program in chunks) composes one module per concern:
`lock` (the run folder, one run at a time), `signals` (Ctrl-C), `progress`
(the bar or one line per chunk), `memory_guard` (a run too big, in one line),
`handshake` (the processes of a multi-process run at its start), `resume`
(the config and state a run starts from), `stop` (stop rules, NaN/inf, the
checkpoint of an interrupted run), `summary` (summary.json and the plot at
the end) and `state` (the record of a run being trained); every file they
write goes through `jaxwarp.storage` (whole or not at all, a full or
read-only folder in one line). Beside them: `checkpoint` (Orbax
checkpoints and config.yaml), `metrics` (metrics.jsonl / .csv / TensorBoard),
`plot` (the learning curve), `distributed` (multi-process start) and
`evaluate` (a saved run played against random play; its GIF). The shell
imports the algorithm (`jaxwarp.train`) and the models, never the reverse.
"""
