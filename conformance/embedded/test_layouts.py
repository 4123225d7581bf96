"""Layout templates: sparse, nested and quantized tensors on the device, against the CPU.

Each template builds the same tensor on the device and on the CPU and compares what the
device computes with what the CPU does (float32 inputs):

- ``test_sparse_coo``: ``to_sparse()`` of a device tensor is a COO tensor on the device;
  ``coalesce`` of one with duplicate entries, the sum of two sparse tensors and
  ``to_dense`` equal the CPU's (indices, values and dense results).
- ``test_sparse_csr``: ``to_sparse_csr()`` of a device tensor has the CPU's
  ``crow_indices``, ``col_indices`` and ``values``; a CSR by dense matmul and
  ``to_dense`` equal the CPU's.
- ``test_nested_tensor_strided``: ``torch.nested.nested_tensor`` on the device (the strided
  NestedTensor layout): elementwise ops (a unary op, a scalar multiply, the sum of two
  nested tensors of the same structure) stay nested on the device, and ``unbind`` gives
  the CPU's components.
- ``test_nested_tensor_jagged``: the same with ``layout=torch.jagged`` (a tensor subclass
  over a dense ``values()`` and ``offsets()``, both on the device, the offsets the CPU's).
- ``test_quantize_per_tensor``: ``torch.quantize_per_tensor`` of a device tensor, for
  ``quint8`` and ``qint8``: stays on the device with its scale and zero point, and its
  ``int_repr`` and ``dequantize`` equal the CPU's.
- ``test_quantize_per_channel``: ``torch.quantize_per_channel`` likewise, with scales and
  zero points per channel (``q_per_channel_scales``, ``q_per_channel_zero_points``).

The template names say the feature, so the report's feature matrix puts each in its row
(sparse tensors, nested tensors, quantization). A backend that refuses a layout fails its
templates with the refusal (``unsupported feature 'sparse'``, a missing quantize lowering).
Compile mode skips the file: it checks layouts, not compiled code.
"""

from __future__ import annotations

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests

from conformance.embedded._samples import SEED, compiling


def _randn(*shape: int, seed: int = SEED) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _with_zeros(*shape: int, seed: int = SEED) -> torch.Tensor:
    """A CPU tensor with about half its entries zero: something for a sparse layout."""
    x = _randn(*shape, seed=seed)
    return x * (_randn(*shape, seed=seed + 1) > 0)


class TestLayouts(TestCase):
    """Sparse, nested and quantized tensors on the device under test."""

    def setUp(self) -> None:
        super().setUp()
        if compiling():
            self.skipTest("runs eager only: this template checks layouts, not compiled code")

    def _on(self, tensor: torch.Tensor, device: str) -> None:
        self.assertEqual(tensor.device, torch.device(device))

    def test_sparse_coo(self, device):
        a_cpu, b_cpu = _with_zeros(4, 6), _with_zeros(4, 6, seed=SEED + 2)
        a = a_cpu.to(device).to_sparse()
        self.assertEqual(a.layout, torch.sparse_coo)
        self._on(a, device)
        self.assertEqual(a.to_dense().cpu(), a_cpu)

        # Duplicate entries: coalesce sums them and sorts the indices, as on the CPU.
        indices = torch.tensor([[0, 2, 0, 1], [1, 3, 1, 0]])
        values = torch.tensor([1.0, 2.0, 3.0, 4.0])
        uncoalesced = torch.sparse_coo_tensor(indices, values, (3, 4))
        expected = uncoalesced.coalesce()
        got = torch.sparse_coo_tensor(indices.to(device), values.to(device), (3, 4)).coalesce()
        self._on(got, device)
        self.assertTrue(got.is_coalesced())
        self.assertEqual(got.indices().cpu(), expected.indices())
        self.assertEqual(got.values().cpu(), expected.values())

        total = a + b_cpu.to(device).to_sparse()
        self.assertEqual(total.layout, torch.sparse_coo)
        self._on(total, device)
        expected = (a_cpu.to_sparse() + b_cpu.to_sparse()).coalesce()
        total = total.coalesce()
        self.assertEqual(total.indices().cpu(), expected.indices())
        self.assertEqual(total.values().cpu(), expected.values())
        self.assertEqual(total.to_dense().cpu(), a_cpu + b_cpu)

    def test_sparse_csr(self, device):
        a_cpu, dense_cpu = _with_zeros(5, 6), _randn(6, 3, seed=SEED + 3)
        expected = a_cpu.to_sparse_csr()
        a = a_cpu.to(device).to_sparse_csr()
        self.assertEqual(a.layout, torch.sparse_csr)
        self._on(a, device)
        self.assertEqual(a.crow_indices().cpu(), expected.crow_indices())
        self.assertEqual(a.col_indices().cpu(), expected.col_indices())
        self.assertEqual(a.values().cpu(), expected.values())
        self.assertEqual(a.to_dense().cpu(), a_cpu)

        product = a @ dense_cpu.to(device)
        self._on(product, device)
        self.assertEqual(product.cpu(), expected @ dense_cpu, atol=1e-5, rtol=1e-5)

    def _nested(self, device: str, layout: torch.layout) -> torch.Tensor:
        parts = [_randn(2, 5), _randn(4, 5, seed=SEED + 1), _randn(1, 5, seed=SEED + 2)]
        nt = torch.nested.nested_tensor(parts, layout=layout, device=device)
        self.assertTrue(nt.is_nested)
        self.assertEqual(nt.layout, layout)
        self._on(nt, device)

        result = nt.sin() * 2.0 + nt
        self.assertTrue(result.is_nested)
        self._on(result, device)
        got = result.unbind()
        self.assertEqual(len(got), len(parts))
        for component, part in zip(got, parts, strict=True):
            self._on(component, device)
            self.assertEqual(component.cpu(), part.sin() * 2.0 + part)
        return nt

    def test_nested_tensor_strided(self, device):
        self._nested(device, torch.strided)

    def test_nested_tensor_jagged(self, device):
        nt = self._nested(device, torch.jagged)
        self._on(nt.values(), device)
        self._on(nt.offsets(), device)
        self.assertEqual(nt.offsets().cpu(), torch.tensor([0, 2, 6, 7]))

    def test_quantize_per_tensor(self, device):
        x_cpu = _randn(4, 8) * 3
        for dtype, scale, zero_point in ((torch.quint8, 0.05, 128), (torch.qint8, 0.04, 3)):
            expected = torch.quantize_per_tensor(x_cpu, scale, zero_point, dtype)
            q = torch.quantize_per_tensor(x_cpu.to(device), scale, zero_point, dtype)
            self.assertEqual(q.dtype, dtype)
            self.assertEqual(q.qscheme(), torch.per_tensor_affine)
            self._on(q, device)
            self.assertEqual(q.q_scale(), scale)
            self.assertEqual(q.q_zero_point(), zero_point)
            self.assertEqual(q.int_repr().cpu(), expected.int_repr())
            self.assertEqual(q.dequantize().cpu(), expected.dequantize())

    def test_quantize_per_channel(self, device):
        x_cpu = _randn(3, 8) * 3
        scales = torch.tensor([0.05, 0.02, 0.1], dtype=torch.float64)
        zero_points = torch.tensor([0, 10, -5])
        for dtype in (torch.qint8, torch.quint8):
            points = zero_points + 100 if dtype == torch.quint8 else zero_points
            expected = torch.quantize_per_channel(x_cpu, scales, points, 0, dtype)
            q = torch.quantize_per_channel(
                x_cpu.to(device), scales.to(device), points.to(device), 0, dtype
            )
            self.assertEqual(q.dtype, dtype)
            self.assertEqual(q.qscheme(), torch.per_channel_affine)
            self._on(q, device)
            self.assertEqual(q.q_per_channel_scales().cpu(), scales)
            self.assertEqual(q.q_per_channel_zero_points().cpu(), points)
            self.assertEqual(q.int_repr().cpu(), expected.int_repr())
            self.assertEqual(q.dequantize().cpu(), expected.dequantize())


instantiate_device_type_tests(TestLayouts, globals())

if __name__ == "__main__":
    run_tests()
