"""Kubeflow Pipelines v2 front end (docs/kfp.md): one lightweight component per step, generated
from the step's signature; the train-and-serve pipelines; the compiled artifacts under
components/ and pipelines/; recurring runs. Only `components`, `pipelines` and `compile`
import kfp; `runtime` (inside the step pod) and the pure modules do not."""
