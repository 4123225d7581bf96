"""Strict loading: every problem names the file, the line and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

import skiplists
from conformance.errors import ConfigError
from conformance.model import TestIdentity, suite_of_file
from skiplists import SkiplistError

GOOD = """\
# emu entries
[skiplist]
backend = "emu"
torch = "2.13"

[[skip]]
test_id = "test_ops.py::TestCommon::test_out_cumsum_float32"
tier = "xfail"
category = "missing_lowering"
detail = "aten::cumsum.out"
reason = "cumsum.out has no lowering yet"
link = "https://example.org/issues/1"
owner = "emu-team"
review = 2027-01-31

[[skip]]
op = "nn.functional.conv2d"
dtypes = ["float16", "bfloat16"]
tier = "skip"
category = "unsupported_dtype"
detail = "float16"
reason = "half precision convolutions are not emulated"

[[skip]]
pattern = 'test_nn\\.py::TestNN::test_ctc_loss_.*'
tier = "deselect"
category = "crash"
reason = "ctc_loss aborts in the allocator"
"""


def write(tmp_path: Path, text: str, name: str = "list.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def load(
    *paths: Path, backend: str = "emu", torch_version: str = "2.13.0+cpu"
) -> skiplists.Skiplist:
    return skiplists.load(list(paths), backend=backend, torch_version=torch_version)


def identity(test_id: str, **fields: str) -> TestIdentity:
    file, test_class, _name = test_id.split("::")
    return TestIdentity(
        nodeid=test_id,
        test_id=test_id,
        file=file,
        test_class=test_class,
        suite=suite_of_file(file),
        **fields,
    )


def error(tmp_path: Path, text: str, **kwargs: str) -> SkiplistError:
    path = write(tmp_path, text)
    with pytest.raises(SkiplistError) as info:
        load(path, **kwargs)
    assert info.value.file == str(path)
    return info.value


def test_good_file_loads_every_field(tmp_path: Path) -> None:
    skiplist = load(write(tmp_path, GOOD))
    first, second, third = skiplist.entries
    assert first.selector.test_ids == ("test_ops.py::TestCommon::test_out_cumsum_float32",)
    assert (first.tier, first.category, first.detail) == (
        "xfail",
        "missing_lowering",
        "aten::cumsum.out",
    )
    assert first.link == "https://example.org/issues/1" and first.owner == "emu-team"
    assert str(first.review) == "2027-01-31" and first.strict
    assert first.where.endswith("list.toml:6")
    assert second.selector.dtypes == ("float16", "bfloat16") and second.where.endswith(":16")
    assert third.selector.kind == "pattern" and third.line == 24


def test_error_is_a_config_error_with_location(tmp_path: Path) -> None:
    exc = error(tmp_path, GOOD.replace('tier = "skip"', 'tier = "skipped"'))
    assert isinstance(exc, ConfigError)
    assert (exc.line, exc.field) == (19, "tier")
    assert str(exc).startswith(f"{exc.file}:19: field 'tier': 'skipped' is not a tier")


@pytest.mark.parametrize(
    ("old", "new", "line", "field", "words"),
    [
        ('owner = "emu-team"', 'owners = "emu-team"', 13, "owners", "did you mean 'owner'"),
        ('category = "crash"', 'category = "crashes"', 27, "category", "did you mean 'crash'"),
        ('reason = "ctc_loss aborts in the allocator"', "", 24, "reason", "is required"),
        (
            'reason = "cumsum.out has no lowering yet"',
            'reason = "TODO"',
            11,
            "reason",
            "placeholder",
        ),
        (
            "'test_nn\\.py::TestNN::test_ctc_loss_.*'",
            "'test_nn(.py'",
            25,
            "pattern",
            "invalid regular",
        ),
        ("'test_nn\\.py::TestNN::test_ctc_loss_.*'", "'.*'", 25, "pattern", "empty string"),
        ('"float16", "bfloat16"', '"float16", "half16"', 18, "dtypes", "not a torch dtype"),
        ('detail = "aten::cumsum.out"', 'detail = "cumsum"', 10, "detail", "operator overload"),
        ("review = 2027-01-31", 'review = "soon"', 14, "review", "not a date"),
        ('link = "https://example.org/issues/1"', 'link = "issue 1"', 12, "link", "http"),
        ('tier = "skip"', 'tier = "skip"\nstrict = false', 20, "strict", "only applies"),
        (
            'test_id = "test_ops.py::TestCommon::test_out_cumsum_float32"',
            'test_id = "test_ops.py::TestCommonPRIVATEUSE1::test_out_cumsum_float32"',
            7,
            "test_id",
            "device-independent",
        ),
        (
            'test_id = "test_ops.py::TestCommon::test_out_cumsum_float32"',
            'test_id = "cumsum"',
            7,
            "test_id",
            "not a test_id",
        ),
        (
            'op = "nn.functional.conv2d"',
            'op = "add"\ntest_id = "a.py::T::t"',
            17,
            "op",
            "cannot be combined",
        ),
        ('torch = "2.13"', 'torch = "2.12"', 4, "torch", "not 2.13"),
        ('backend = "emu"', 'backend = "xpu"', 3, "backend", "not 'emu'"),
        ("[skiplist]", "[skiplists]", 2, "skiplists", "top-level"),
        ('tier = "deselect"', "tier = deselect", 26, "", "syntax"),
    ],
)
def test_bad_values_are_located(
    tmp_path: Path, old: str, new: str, line: int, field: str, words: str
) -> None:
    assert old in GOOD
    exc = error(tmp_path, GOOD.replace(old, new))
    assert (exc.line, exc.field) == (line, field), str(exc)
    assert words in str(exc)


def test_duplicate_and_conflicting_entries_in_one_file(tmp_path: Path) -> None:
    repeated = GOOD + GOOD[GOOD.index("[[skip]]") : GOOD.index("[[skip]]", 100)]
    exc = error(tmp_path, repeated)
    assert exc.field == "test_id" and "duplicates the entry at line 6" in str(exc)
    overlapping = (
        GOOD + '\n[[skip]]\nop = "nn.functional.conv2d"\ndtypes = ["float16"]\n'
        'tier = "xfail"\ncategory = "numerical_mismatch"\nreason = "off by one ulp"\n'
    )
    exc = error(tmp_path, overlapping)
    assert exc.field == "op" and "conflicts with (tier skip vs xfail)" in str(exc)


def test_later_layer_overrides_earlier_one(tmp_path: Path) -> None:
    base = write(tmp_path, GOOD, "base.toml")
    overlay = write(
        tmp_path,
        (
            '[skiplist]\ntorch = "2.13"\n\n[[skip]]\n'
            'test_id = "test_ops.py::TestCommon::test_out_cumsum_float32"\n'
            'tier = "skip"\ncategory = "not_applicable"\nreason = "out= variants are not run on 2.13"\n'
        ),
        "torch-2.13.toml",
    )
    skiplist = load(base, overlay)
    entry = skiplist.match(identity("test_ops.py::TestCommon::test_out_cumsum_float32"))
    assert entry is not None and entry.tier == "skip" and entry.where.endswith("torch-2.13.toml:4")
    assert len(skiplist) == 3 and len(skiplist.overrides) == 1


def test_precedence_exact_then_fields_then_pattern(tmp_path: Path) -> None:
    text = GOOD + (
        '\n[[skip]]\nfile = "test_nn.py"\ntemplate = "test_ctc_loss_cpu"\ntier = "xfail"\n'
        'category = "known_bug"\nreason = "wrong blank handling"\n'
    )
    skiplist = load(write(tmp_path, text))
    by_fields = skiplist.match(
        identity("test_nn.py::TestNN::test_ctc_loss_cpu", template="test_ctc_loss_cpu")
    )
    by_pattern = skiplist.match(identity("test_nn.py::TestNN::test_ctc_loss_gpu"))
    assert by_fields is not None and by_fields.tier == "xfail"
    assert by_pattern is not None and by_pattern.tier == "deselect"
    assert skiplist.match(identity("test_nn.py::TestNN::test_ctc_loss")) is None
    conv = identity("test_ops.py::TestCommon::test_x", op="nn.functional.conv2d", dtype="bfloat16")
    assert skiplist.match(conv) is skiplist.entries[1]
    assert (
        skiplist.match(
            identity("test_ops.py::TestCommon::test_x", op="nn.functional.conv2d", dtype="float32")
        )
        is None
    )


def test_default_paths_layers_common_backend_and_overlay(tmp_path: Path) -> None:
    names = (
        "common/base.toml",
        "common/torch-2.13.toml",
        "emu/base.toml",
        "emu/upstream.toml",
        "emu/torch-2.13.toml",
        "emu/torch-2.12.toml",
    )
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("", encoding="utf-8")
    paths = skiplists.default_paths("emu", "2.13.0+cpu", data_dir=tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in paths] == [
        "common/base.toml",
        "common/torch-2.13.toml",
        "emu/base.toml",
        "emu/upstream.toml",
        "emu/torch-2.13.toml",
    ]
    common = [tmp_path / "common/base.toml", tmp_path / "common/torch-2.13.toml"]
    assert skiplists.common_paths("2.13.0", data_dir=tmp_path) == common
    assert skiplists.default_paths("other", "2.13.0", data_dir=tmp_path) == common
    # The CPU passes what the common layer expects PrivateUse1 devices to fail.
    assert skiplists.default_paths("cpu", "2.13.0", data_dir=tmp_path) == []


def test_missing_file_and_bad_torch_version(tmp_path: Path) -> None:
    with pytest.raises(SkiplistError, match="no such skiplist file"):
        load(tmp_path / "absent.toml")
    with pytest.raises(SkiplistError, match=r"MAJOR\.MINOR"):
        skiplists.default_paths("emu", "nightly")


def test_shipped_files_load() -> None:
    paths = skiplists.default_paths("emu", "2.13.0+cpu")
    skiplists.load(paths, backend="emu", torch_version="2.13.0+cpu")


EMBEDDED_ONLY = """\
[skiplist]
suite = "embedded"

[[skip]]
test_id = "embedded/test_modules.py::TestModule::test_forward_nn_BCEWithLogitsLoss_float32"
tier = "xfail"
category = "numerical_mismatch"
reason = "loss differs"

[[skip]]
template = "test_out"
op = "cumsum"
tier = "xfail"
category = "missing_lowering"
detail = "aten::cumsum.out"
reason = "cumsum.out has no lowering yet"
"""


def test_an_entry_for_one_suite_never_applies_to_the_other(tmp_path: Path) -> None:
    skiplist = load(write(tmp_path, EMBEDDED_ONLY))
    name = "test_modules.py::TestModule::test_forward_nn_BCEWithLogitsLoss_float32"
    embedded = identity("embedded/" + name, template="test_forward")
    upstream = identity(name, template="test_forward")
    assert (embedded.suite, upstream.suite) == ("embedded", "upstream")
    assert skiplist.match(embedded) is not None and skiplist.match(upstream) is None
    out = "::TestCommon::test_out_cumsum_float32"
    assert skiplist.match(identity("embedded/test_ops.py" + out, template="test_out", op="cumsum"))
    # The same structured fields on an upstream test: the file's suite scopes the entry.
    assert skiplist.match(identity("test_ops.py" + out, template="test_out", op="cumsum")) is None


def test_a_structured_entry_scoped_to_a_suite_is_no_more_specific(tmp_path: Path) -> None:
    text = EMBEDDED_ONLY.replace('suite = "embedded"', "") + (
        '\n[[skip]]\ntemplate = "test_out"\nop = "cumsum"\ndtypes = ["float32"]\n'
        'suite = "embedded"\ntier = "skip"\ncategory = "other"\nreason = "narrower"\n'
    )
    skiplist = load(write(tmp_path, text))
    out = "::TestCommon::test_out_cumsum_float32"
    fields = {"template": "test_out", "op": "cumsum", "dtype": "float32"}
    assert skiplist.match(identity("embedded/test_ops.py" + out, **fields)).reason == "narrower"
    # Unscoped, the first cumsum entry applies to both suites.
    assert skiplist.match(identity("test_ops.py" + out, **fields)).tier == "xfail"


@pytest.mark.parametrize(
    ("entry", "line", "field", "message"),
    [
        (
            'test_id = "test_ops.py::TestCommon::test_out_add_float32"',
            6,
            "test_id",
            "is a test of the upstream suite, but the file is for the embedded suite",
        ),
        ('file = "test_ops.py"\ntemplate = "test_out"', 6, "file", "upstream suite"),
        ('template = "test_out"\nsuite = "cuda"', 7, "suite", "'cuda' is not a suite"),
        ('suite = "upstream"', 6, "suite", "an entry needs a selector"),
    ],
)
def test_suites_are_checked_where_they_are_written(
    tmp_path: Path, entry: str, line: int, field: str, message: str
) -> None:
    text = f'[skiplist]\nsuite = "embedded"\n\n[[skip]]\n{entry}\ntier = "skip"\n'
    text += 'category = "other"\nreason = "r"\n'
    text = text.replace("[[skip]]\n", "[[skip]]\n# entry\n")
    path = write(tmp_path, text)
    with pytest.raises(SkiplistError) as caught:
        load(path)
    error = caught.value
    assert message in str(error), str(error)
    assert f"{path.name}:{line}" in str(error) and field in str(error)


def test_a_bad_suite_in_the_header_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, '[skiplist]\nsuite = "both"\n')
    with pytest.raises(SkiplistError, match="'both' is not a suite; use one of upstream, embedded"):
        load(path)


def test_shipped_common_layer_names_torchs_own_limits_for_every_backend() -> None:
    from conformance.model import TestIdentity

    paths = skiplists.common_paths("2.13.0+cpu")
    assert [p.name for p in paths] == ["torch-2.13.toml"]
    test_id = "test_modules.py::TestModule::test_to_nn_Linear_swap_False_set_grad_True_float32"
    for backend in ("emu", "another_backend"):
        listed = skiplists.load(
            skiplists.default_paths(backend, "2.13.0+cpu"), backend=backend, torch_version="2.13.0"
        )
        identity = TestIdentity(
            nodeid=test_id, test_id=test_id, file="test_modules.py", test_class="TestModule",
            template="test_to", suite="upstream",
        )  # fmt: skip
        entry = listed.match(identity)
        assert entry is not None and entry.category == "torch_limitation", backend
