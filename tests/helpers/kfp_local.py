"""kfp.local as KFP's backend behaves, for the tests that run pipelines with it."""

from __future__ import annotations

from typing import Any


def drop_unset_optional_inputs() -> Any:
    """kfp.local 2.17 casts every integer input with int(), also an optional one nobody set
    (value None), and fails; KFP's backend leaves such an input out, so the function's own
    default (None) applies. Do what the backend does. The train components have such inputs
    (min_available)."""
    from kfp.local import executor_input_utils

    original = executor_input_utils.executor_input_to_dict

    def to_dict(executor_input: Any, component_spec: Any) -> Any:
        values = executor_input.inputs.parameter_values
        for name in list(values):
            if values[name].WhichOneof("kind") is None:
                del values[name]
        return original(executor_input, component_spec)

    return to_dict
