"""The one size syntax (raycompile/sizes.py): decimal and binary suffixes, as ccache 4 reads them."""

from __future__ import annotations

import pytest

from raycompile.errors import SettingsError
from raycompile.sizes import format_size, parse_size


@pytest.mark.parametrize("text,expected", [
    ("0", 0),
    ("1234", 1234),
    ("1234B", 1234),
    ("1234 b", 1234),
    ("500K", 500_000),
    ("500k", 500_000),
    ("500KB", 500_000),
    ("5M", 5_000_000),
    ("5mb", 5_000_000),
    ("5G", 5_000_000_000),
    ("5 GB", 5_000_000_000),
    ("2T", 2 * 10**12),
    ("1.5G", 1_500_000_000),
    (".5K", 500),
    ("4Ki", 4096),
    ("4KiB", 4096),
    ("4kib", 4096),
    ("5Mi", 5 * 2**20),
    ("5Gi", 5 * 2**30),
    ("5GIB", 5 * 2**30),
    ("1Ti", 2**40),
    ("1.5Gi", 3 * 2**29),
    ("  10G  ", 10**10),
])
def test_sizes_parse(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "-5G", "5X", "5Gb!", "G", "5 G B", "5iB", "1e9", "5,000", "inf", "nan"])
def test_bad_sizes_say_what_a_size_looks_like(text: str) -> None:
    with pytest.raises(SettingsError) as e:
        parse_size(text)
    assert f"{text!r} is not a size: expected a size such as" in str(e.value)
    assert "powers of 1000" in str(e.value) and "powers of 1024" in str(e.value)


def test_a_non_string_is_not_a_size() -> None:
    with pytest.raises(SettingsError, match="is not a size"):
        parse_size(5)  # type: ignore[arg-type]


@pytest.mark.parametrize("n,expected", [
    (0, "0 B"),
    (999, "999 B"),
    (1000, "1.0 kB"),
    (1500, "1.5 kB"),
    (999_949, "999.9 kB"),
    (999_950, "1.0 MB"),  # never "1000.0 kB"
    (5 * 10**9, "5.0 GB"),
    (10 * 2**30, "10.7 GB"),
    (3 * 10**12, "3.0 TB"),
    (5 * 10**15, "5000.0 TB"),
])
def test_sizes_format_in_decimal_units(n: int, expected: str) -> None:
    assert format_size(n) == expected


@pytest.mark.parametrize("n", [0, 1, 999, 1000, 12_345, 987_654_321, 5 * 10**9, 2**40])
def test_format_reads_back_within_its_rounding(n: int) -> None:
    back = parse_size(format_size(n))
    assert abs(back - n) <= max(1, n * 0.05)
