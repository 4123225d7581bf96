"""Fused recurrent cells: the kernels ``LSTMCell``, ``GRUCell`` and the ``LSTM``/``GRU``
layers call on accelerators, with their backward kernels.

The CPU has no fused cell kernels (its cells run op by op), so these are written with
emu's own lowered ops. The layout is the one autograd's formulas expect: gates are
concatenated along dim 1 (LSTM: input, forget, cell, output; GRU: reset, update, new),
and the forward returns a workspace of saved activations that only the backward reads.
"""

from __future__ import annotations

import torch

from torch_emu.lowering.registry import lowering


def _gates(input_gates, hidden_gates, input_bias, hidden_bias):
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    return gates


@lowering("aten::_thnn_fused_lstm_cell")
def fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    i, f, g, o = _gates(input_gates, hidden_gates, input_bias, hidden_bias).chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


@lowering("aten::_thnn_fused_lstm_cell_backward_impl")
def fused_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    if grad_hy is None and grad_cy is None:
        return None, None, None
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_hy = torch.zeros_like(cy) if grad_hy is None else grad_hy
    grad_c = grad_hy * o * (1 - tanh_cy * tanh_cy)
    if grad_cy is not None:
        grad_c = grad_c + grad_cy
    grad_gates = torch.cat(
        [
            grad_c * g * i * (1 - i),
            grad_c * cx * f * (1 - f),
            grad_c * i * (1 - g * g),
            grad_hy * tanh_cy * o * (1 - o),
        ],
        1,
    )
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_c * f, grad_bias


@lowering("aten::_thnn_fused_gru_cell")
def fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    if input_bias is not None:
        input_gates = input_gates + input_bias
        hidden_gates = hidden_gates + hidden_bias
    input_r, input_z, input_n = input_gates.chunk(3, 1)
    hidden_r, hidden_z, hidden_n = hidden_gates.chunk(3, 1)
    r = (input_r + hidden_r).sigmoid()
    z = (input_z + hidden_z).sigmoid()
    n = (input_n + r * hidden_n).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, hidden_n], 1)


@lowering("aten::_thnn_fused_gru_cell_backward")
def fused_gru_cell_backward(grad_hy, workspace, has_bias):
    r, z, n, hx, hidden_n = workspace.chunk(5, 1)
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_r = grad_n * hidden_n * r * (1 - r)
    grad_z = grad_hy * (hx - n) * z * (1 - z)
    grad_input_gates = torch.cat([grad_r, grad_z, grad_n], 1)
    grad_hidden_gates = torch.cat([grad_r, grad_z, grad_n * r], 1)
    grad_input_bias = grad_input_gates.sum(0) if has_bias else None
    grad_hidden_bias = grad_hidden_gates.sum(0) if has_bias else None
    return grad_input_gates, grad_hidden_gates, grad_hy * z, grad_input_bias, grad_hidden_bias
