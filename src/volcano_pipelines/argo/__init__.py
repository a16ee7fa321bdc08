"""Argo Workflows front end (Hera): WorkflowTemplates per step, the train-and-serve pipeline
and the nightly CronWorkflow, compiled to pipelines/argo/ (docs/argo.md). Needs the `hera`
extra at compile time only; the runtime image needs nothing beyond the package."""
