"""How a step is described to its front ends, read from the step itself: its parameters from
its signature, type hints and docstring, parameter groups spread into flat inputs and
gathered back (params.py), and how each front end spells a parameter (spelling.py). The steps
(steps/) are the API; this package is the framework that turns them into CLI flags, KFP
inputs and Argo parameters."""
