"""The remote commands of `coordinatorctl` (09 §4): each runs from `command.py` through one module
per step — `args.py` (its command line), `checks.py` (the local checks of its inputs),
`request.py` (its API call), `exchange.py` (the HTTP exchange under the client policy),
`outcome.py` (the answer to an outcome) and `text.py` (text mode); `watch.py` follows a run
(`start --wait`, `status --watch`) and `drawing.py` draws a run's path over its workflow's graph
(`inspect --graph`). `models.py` is their typed boundary, the one module of `coordinatorctl`
that imports the generated models. The package itself imports nothing, so that the command
line's parser (which reads `args.py`) loads none of the others for an offline command."""
