"""The embedded conformance suite: device-generic tests built from the torch wheel's databases.

Test files in this folder (``test_*.py``) are ordinary upstream-style PyTorch test files:
unittest ``TestCase`` classes instantiated per device with ``instantiate_device_type_tests``
and parametrized over ``op_db``, ``module_db``, ``optim_db`` and torch's autocast op lists,
and multi-process ``torch.distributed`` tests (two ranks per test).
They need no PyTorch source checkout. Which ops, modules and optimizers they cover is the
*selection*, read from the ``CONFORMANCE_SELECTION`` environment variable when the files
are collected.

This module stays import-light (no torch) so the command line can use it; the selection
logic that needs torch lives in :mod:`conformance.embedded.selection`.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "COLLECTIVE_TEMPLATES",
    "DEFAULT_SELECTION",
    "MODE_ENV",
    "SAMPLE_INDEX_ENV",
    "SELECTIONS",
    "SELECTION_ENV",
    "SUITE_DIR",
    "TEMPLATES",
]

#: The folder holding the suite's test files; pass it to pytest.
SUITE_DIR: Path = Path(__file__).resolve().parent

#: Environment variable naming the selection, read at collection time.
SELECTION_ENV = "CONFORMANCE_SELECTION"
#: ``compile`` runs the templates' op calls under torch.compile (see ``_samples``).
MODE_ENV = "CONFORMANCE_MODE"
#: Upstream's switch to run one sample of an OpInfo test alone; the templates honour it.
SAMPLE_INDEX_ENV = "PYTORCH_OPINFO_SAMPLE_INPUT_INDEX"

#: The named selections, smallest first.
SELECTIONS = ("smoke", "core", "full")

#: The selection used when the environment variable is unset or empty.
DEFAULT_SELECTION = "smoke"

#: Every template of the suite (the test functions before parametrization), by file.
#: The distributed templates parametrized by dtype (the collectives that move data).
COLLECTIVE_TEMPLATES = (
    "test_all_reduce",
    "test_reduce_scatter_tensor",
    "test_reduce_scatter",
    "test_all_gather",
    "test_all_gather_into_tensor",
    "test_broadcast",
    "test_all_to_all",
    "test_all_to_all_single",
    "test_send_recv",
)
TEMPLATES: dict[str, tuple[str, ...]] = {
    "test_ops.py": (
        "test_compare_cpu",
        "test_out",
        "test_out_warning",
        "test_variant_consistency_eager",
        "test_noncontiguous_samples",
        "test_dtypes",
        "test_errors",
        "test_python_ref",
        "test_python_ref_torch_fallback",
        "test_cow_input",
        "test_conj_view",
        "test_neg_view",
        "test_fake",
    ),
    "test_ops_gradients.py": ("test_fn_grad_compare_cpu", "test_forward_mode_AD"),
    "test_modules.py": ("test_forward", "test_cpu_gpu_parity", "test_errors", "test_to"),
    "test_autocast.py": (
        "test_autocast_lower_precision_fp",
        "test_autocast_fp32",
        "test_autocast_promote",
        "test_autocast_builtin_promote",
        "test_autocast_banned",
        "test_autocast_default_dtype",
        "test_autocast_nested",
        "test_autocast_disabled",
        "test_autocast_cache",
        "test_autocast_ignored_types",
        "test_autocast_backward",
    ),
    "test_profiler.py": (
        "test_profiler_device_events",
        "test_profiler_input_shapes",
        "test_profiler_with_stack",
        "test_profiler_chrome_trace",
        "test_profiler_memory",
    ),
    "test_runtime.py": (
        "test_runtime_device_selection",
        "test_runtime_synchronize",
        "test_runtime_streams",
        "test_runtime_events",
        "test_runtime_memory",
        "test_runtime_rng",
        "test_runtime_serialization",
        "test_runtime_pinned_memory",
    ),
    "test_layouts.py": (
        "test_sparse_coo",
        "test_sparse_csr",
        "test_nested_tensor_strided",
        "test_nested_tensor_jagged",
        "test_quantize_per_tensor",
        "test_quantize_per_channel",
    ),
    "test_optim.py": (
        "test_step_matches_cpu",
        "test_foreach_matches_forloop",
        "test_fused_matches_forloop",
    ),
    "test_distributed.py": (
        *COLLECTIVE_TEMPLATES,
        "test_barrier",
        "test_default_backend",
        "test_ddp",
        "test_fsdp2",
        "test_tensor_parallel",
        "test_dtensor_redistribute",
        "test_pipeline",
    ),
}
