"""The validation rules at their exact limits, and the field each error names (gaps a
mutation run of validate.py found: off-by-one lengths and errors naming no field passed
every other test)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from volcano_pipelines.errors import InputError
from volcano_pipelines.objects import validate as kube_validate
from volcano_pipelines.volcano import validate as volcano_validate

# The value rules (kube.validate) and the job rules (volcano.validate) under one name.
v = SimpleNamespace(**{**vars(kube_validate), **vars(volcano_validate)})


def _ok(check: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    check("spec.field", *args, **kwargs)


def _bad(check: Callable[..., None], value: Any, *args: Any, **kwargs: Any) -> InputError:
    with pytest.raises(InputError) as info:
        check("spec.field", value, *args, **kwargs)
    assert info.value.field == "spec.field" and info.value.value == value and info.value.allowed
    return info.value


def test_dns_label_is_at_most_63_characters() -> None:
    _ok(v.check_dns_label, "a" * 63)
    _bad(v.check_dns_label, "a" * 64)
    _ok(v.check_dns_label, "1abc")  # DNS-1123: may start with a digit
    err = _bad(v.check_dns_label, "1abc", must_start_with_letter=True)  # DNS-1035 may not
    assert "starting with a lowercase letter and" in err.allowed
    assert "a lowercase letter or digit" in _bad(v.check_dns_label, "-x").allowed


def test_dns_subdomain_is_at_most_253_characters() -> None:
    at_limit = ".".join(["a" * 63] * 4)[:253].rstrip(".")
    assert len(at_limit) == 253
    _ok(v.check_dns_subdomain, at_limit)
    _bad(v.check_dns_subdomain, at_limit[:-1] + "ab")
    _bad(v.check_dns_subdomain, 5)


def test_label_key_limits_and_prefix() -> None:
    _ok(v.check_label_key, "a" * 63)
    _bad(v.check_label_key, "a" * 64)
    prefix = ".".join(["p" * 63] * 4)[:253].rstrip(".")
    _ok(v.check_label_key, f"{prefix}/name")
    _bad(v.check_label_key, f"{prefix}x/name")
    err = _bad(v.check_label_key, "Bad_Prefix/name")
    assert "prefix" in err.allowed


def test_label_value_is_at_most_63_characters_or_empty() -> None:
    _ok(v.check_label_value, "v" * 63)
    _ok(v.check_label_value, "")
    _bad(v.check_label_value, "v" * 64)


def test_labels_and_annotations_name_the_offending_key() -> None:
    with pytest.raises(InputError) as info:
        v.check_annotations("job.annotations", {"ok": "fine", "bad key!": "x"})
    assert info.value.field == "job.annotations['bad key!']"
    with pytest.raises(InputError) as info:
        v.check_annotations("job.annotations", {"ok": "nul\x00inside"})
    assert info.value.field == "job.annotations['ok']"


def test_process_strings_are_strings_without_nul() -> None:
    _ok(v.check_process_string, "anything at all: $(rm -rf /) ; 'quotes'")
    assert _bad(v.check_process_string, 3).allowed == "a string"
    _bad(v.check_process_string, "a\x00b")


def test_positive_seconds() -> None:
    _ok(v.check_positive_seconds, 0.001)
    _ok(v.check_positive_seconds, 1)
    for bad in (0, -1, True, "5", None):
        _bad(v.check_positive_seconds, bad)


def test_positive_integers_say_which_bound() -> None:
    assert _bad(v.check_positive, 0).allowed == "an integer >= 1"
    assert _bad(v.check_positive, -1, allow_zero=True).allowed == "an integer >= 0"
    _ok(v.check_positive, 0, allow_zero=True)


def test_http_url_refuses_spaces_and_controls_but_not_printable_ascii() -> None:
    _ok(v.check_http_url, "https://host/path!~*'()")
    _bad(v.check_http_url, "https://host/a b")
    _bad(v.check_http_url, "https://host/a\x1fb")
    _bad(v.check_http_url, None)


def test_absolute_paths() -> None:
    _ok(v.check_absolute_path, "/data/x")
    _ok(v.check_absolute_path, "/data/..x/a..b")
    for bad in ("relative", "/", "//", "/data/../etc", "/a/..", "/a b/../c"):
        _bad(v.check_absolute_path, bad)
    assert "'..'" in _bad(v.check_absolute_path, "/data/../etc").allowed
    _bad(v.check_absolute_path, 7)
