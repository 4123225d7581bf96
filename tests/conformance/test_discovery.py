"""The default upstream selection: device-generic files found by reading test/, minus the
exclusion list; and the strict reading of that list."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conformance.discovery import (
    discover_upstream_files,
    module_name_clashes,
    path_matches,
    pick_test_files,
)
from conformance.errors import ConfigError
from conformance.exclusions import DEFAULT_EXCLUSIONS, Exclusion, load_exclusions, parse_exclusions

REAL_UPSTREAM = Path(__file__).resolve().parents[3] / "shared" / "upstream" / "test"

CALL = "instantiate_device_type_tests(TestFoo, globals())"
GENERIC = f"class TestFoo(TestCase):\n    pass\n\n{CALL}\n"
# Inside a block, through the module, over two lines, with options.
INDENTED_CALL = (
    "if True:\n    common_device_type.instantiate_device_type_tests(\n"
    "        TestConv, globals(), only_for='cpu', allow_xpu=True)\n"
)


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


@pytest.mark.skipif(not REAL_UPSTREAM.is_dir(), reason=f"no upstream mirror at {REAL_UPSTREAM}")
def test_every_file_of_the_real_upstream_mirror_is_selected():
    discovered = discover_upstream_files(REAL_UPSTREAM)
    assert discovered.files == (
        "test_binary_ufuncs.py",
        "test_foreach.py",
        "test_indexing.py",
        "test_modules.py",
        "test_ops.py",
        "test_ops_gradients.py",
        "test_reductions.py",
        "test_scatter_gather_ops.py",
        "test_shape_ops.py",
        "test_sort_and_select.py",
        "test_type_promotion.py",
        "test_unary_ufuncs.py",
        "test_view_ops.py",
    )
    assert discovered.excluded == ()
    assert discovered.paths[0] == REAL_UPSTREAM / "test_binary_ufuncs.py"


def test_discovery_reads_the_tree_and_leaves_out_what_is_not_device_generic(tmp_path):
    write(
        tmp_path,
        {
            "test_ops.py": GENERIC,
            "nn/test_convolution.py": INDENTED_CALL,
            "functorch/deep/test_vmap.py": GENERIC,
            "test_plain.py": "class TestPlain(TestCase):\n    pass\n",
            "test_comment.py": f"# {CALL}\n",
            "test_in_string.py": f"HELP = {CALL!r}\n",
            "test_in_docstring.py": f'"""Example:\n\n{CALL}\n"""\n',
            "test_imports_only.py": "from x import (\n    instantiate_device_type_tests,\n)\n",
            "test_cuda.py": GENERIC,  # on the shipped exclusion list
            "helper_generic.py": GENERIC,  # not a test_ file
            "__pycache__/test_ops.py": GENERIC,
            ".hidden/test_ops.py": GENERIC,
        },
    )
    discovered = discover_upstream_files(tmp_path)
    assert discovered.files == (  # top-level files first, then the subfolders'
        "test_ops.py",
        "functorch/deep/test_vmap.py",
        "nn/test_convolution.py",
    )
    [(name, entry)] = discovered.excluded
    assert name == "test_cuda.py" and entry.file == "test_cuda*.py" and "CUDA" in entry.reason

    mine = [Exclusion("functorch/**", "not wanted here"), Exclusion("test_o?s.py", "nor this")]
    discovered = discover_upstream_files(tmp_path, mine)
    assert discovered.files == ("test_cuda.py", "nn/test_convolution.py")
    assert [name for name, _ in discovered.excluded] == [
        "test_ops.py",
        "functorch/deep/test_vmap.py",
    ]


@pytest.mark.parametrize(
    ("path", "pattern", "matches"),
    [
        ("test_cuda_multigpu.py", "test_cuda*.py", True),
        ("nn/test_cuda.py", "test_cuda*.py", False),
        ("nn/test_conv.py", "nn/*", True),
        ("nn/deep/test_conv.py", "nn/*", False),
        ("nn/deep/test_conv.py", "nn/**", True),
        ("nn/deep/test_conv.py", "**/test_conv.py", True),
        ("test_conv.py", "**/test_conv.py", True),
    ],
)
def test_globs_match_folder_by_folder(path, pattern, matches):
    assert path_matches(path, pattern) is matches


@pytest.fixture
def tree(tmp_path):
    return write(
        tmp_path / "test",
        {
            "test_ops.py": GENERIC,
            "test_binary_ufuncs.py": GENERIC,
            "test_unary_ufuncs.py": GENERIC,
            "nn/test_convolution.py": GENERIC,
            "nn/test_pooling.py": GENERIC,
            "nn/helper.py": "",
            "functorch/test_ops.py": GENERIC,
            "functorch/common_utils.py": "",
        },
    )


@pytest.mark.parametrize(
    ("patterns", "picked"),
    [
        (["test_ops"], ["test_ops.py"]),  # a bare name: the top-level file first
        (["test_ops.py", "functorch/test_ops.py"], ["test_ops.py", "functorch/test_ops.py"]),
        (["nn/test_convolution.py"], ["nn/test_convolution.py"]),
        (["nn/test_convolution"], ["nn/test_convolution.py"]),
        (["nn/test_*.py"], ["nn/test_convolution.py", "nn/test_pooling.py"]),
        (["functorch/*"], ["functorch/test_ops.py"]),  # test files only, no helpers
        (["test_*ufuncs.py"], ["test_binary_ufuncs.py", "test_unary_ufuncs.py"]),
        (["test_pooling"], ["nn/test_pooling.py"]),  # no top-level match: found below
        (["nn/helper.py"], ["nn/helper.py"]),  # a name: any file that exists
        (
            ["test_ops", "test_*.py"],
            ["test_ops.py", "test_binary_ufuncs.py", "test_unary_ufuncs.py"],
        ),
    ],
)
def test_files_are_picked_by_name_path_or_glob(tree, patterns, picked):
    assert pick_test_files(tree, patterns) == [tree / name for name in picked]


@pytest.mark.parametrize("pattern", ["test_linalg", "nn/test_linalg.py", "optim/*", "../test/x.py"])
def test_a_pattern_that_matches_nothing_is_named(tree, pattern):
    with pytest.raises(
        ConfigError, match=rf"--files: no test file in .* matches '{re.escape(pattern)}'"
    ):
        pick_test_files(tree, [pattern])


def test_files_pytest_cannot_import_side_by_side_are_found(tree):
    names = ["test_ops.py", "functorch/test_ops.py", "nn/test_convolution.py"]
    assert module_name_clashes(tree, names) == [["test_ops.py", "functorch/test_ops.py"]]
    (tree / "functorch" / "__init__.py").write_text("")  # a package: functorch.test_ops
    assert module_name_clashes(tree, names) == []


def test_the_shipped_exclusion_list_loads_and_gives_reasons():
    entries = load_exclusions()
    assert DEFAULT_EXCLUSIONS.name == "upstream_exclusions.toml"
    assert entries and all(entry.reason and entry.line for entry in entries)
    assert {"test_cuda*.py", "distributed/test_nccl.py"} <= {entry.file for entry in entries}


ENTRY = '[[exclude]]\nfile = "test_cuda.py"\nreason = "needs CUDA"\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            ENTRY + '\n[[exclude]]\nfile = "test_xpu.py"\nreason = "needs XPU"\nowner = "me"\n',
            r"x\.toml:8: \[\[exclude\]\] entry 2, field 'owner': unknown key",
        ),
        (
            ENTRY + '\n[[exclude]]\nfile = "test_xpu.py"\n',
            r"x\.toml:5: \[\[exclude\]\] entry 2, field 'reason': missing",
        ),
        (
            '[[exclude]]\nfile = "test_xpu.py"\nreason = "  "\n',
            r"x\.toml:3: \[\[exclude\]\] entry 1, field 'reason': must be a non-empty string",
        ),
        (
            '[[exclude]]\nfile = "test_xpu.py"\nreasn = "typo"\n',
            r"x\.toml:3: .*field 'reasn': unknown key \(did you mean 'reason'\?\)",
        ),
        (
            ENTRY + "\n" + ENTRY,
            r"x\.toml:6: \[\[exclude\]\] entry 2, field 'file': 'test_cuda.py' is already",
        ),
        (
            '[[exclude]]\nfile = "../outside.py"\nreason = "r"\n',
            r"x\.toml:2: .*entry 1, field 'file': '\.\./outside\.py' is not a relative path",
        ),
        ('[skiplist]\nbackend = "emu"\n', r"x\.toml:1: unknown top-level key 'skiplist'"),
        ('[[exclude]]\nfile = "a.py\n', r"x\.toml:2: TOML syntax error"),
    ],
)
def test_a_bad_exclusion_list_is_an_error_naming_file_line_entry_and_field(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_exclusions(text, Path("x.toml"))


def test_an_exclusion_list_parses_into_entries_with_their_lines(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text("# why these files\n" + ENTRY + '\n[[exclude]]\nfile = "nn/**"\nreason = "r"\n')
    assert load_exclusions(path) == (
        Exclusion("test_cuda.py", "needs CUDA", 3),
        Exclusion("nn/**", "r", 7),
    )
    with pytest.raises(ConfigError, match="cannot read the exclusion list"):
        load_exclusions(tmp_path / "missing.toml")
