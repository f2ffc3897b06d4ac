"""Definition checking: rules, graph analysis, schemas, snapshots and packages."""
