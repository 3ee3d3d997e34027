"""The run's one flat config: the documented schema (schema), its printed reference (doc), YAML
values to the declared types (values), the checks of values and inputs (validation), loading from
a file and --set overrides (loading), and whether a checkpoint was written by the same config
(checkpoint_compat). May import: algo, tasks, util."""
