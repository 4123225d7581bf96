"""Neural-network ops and their backward ops: softmax, activations, layer/batch norm,
convolution, pooling, embedding, losses and dropout."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from torch_emu import plants
from torch_emu.lowering.kernels import derived_kernel, device_generator_state, on_device
from torch_emu.lowering.registry import lower, lowering, resolve

lower("aten::_softmax", "aten::_softmax.out")
lower("aten::_log_softmax", "aten::_log_softmax.out")
lower("aten::_softmax_backward_data", "aten::_softmax_backward_data.out")
lower("aten::_log_softmax_backward_data", "aten::_log_softmax_backward_data.out")

lower("aten::relu", "aten::relu_")
lower("aten::threshold_backward", "aten::threshold_backward.grad_input")
lower("aten::gelu", "aten::gelu.out", "aten::gelu_")
lower("aten::gelu_backward", "aten::gelu_backward.grad_input")
lower("aten::silu", "aten::silu.out", "aten::silu_")
lower("aten::silu_backward.grad_input")
lower("aten::tanh_backward", "aten::tanh_backward.grad_input", **plants.hooks("wrong_grad"))
lower("aten::sigmoid_backward", "aten::sigmoid_backward.grad_input")
lower("aten::leaky_relu", "aten::leaky_relu.out", "aten::leaky_relu_")
lower("aten::leaky_relu_backward", "aten::leaky_relu_backward.grad_input")
lower("aten::hardtanh", "aten::hardtanh.out", "aten::hardtanh_")
lower("aten::hardtanh_backward", "aten::hardtanh_backward.grad_input")
lower("aten::elu", "aten::elu.out", "aten::elu_")
lower("aten::elu_backward", "aten::elu_backward.grad_input")
lower("aten::softplus", "aten::softplus.out")
lower("aten::softplus_backward", "aten::softplus_backward.grad_input")

_native_layer_norm_cpu = derived_kernel(resolve("aten::native_layer_norm"))
_native_layer_norm_backward_cpu = derived_kernel(resolve("aten::native_layer_norm_backward"))
_REDUCED_FLOATS = (torch.float16, torch.bfloat16)


def _as_float(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.float()


@lowering("aten::native_layer_norm")
def _native_layer_norm(input, normalized_shape, weight, bias, eps):
    """Half and bfloat16 are normalized in float32 and give float32 statistics, as
    accelerators (and torch's meta function for any device but the CPU) do; the CPU's
    kernel gives them in the input's dtype."""
    if input.dtype not in _REDUCED_FLOATS:
        return _native_layer_norm_cpu(input, normalized_shape, weight, bias, eps)
    out, mean, rstd = _native_layer_norm_cpu(
        input.float(), normalized_shape, _as_float(weight), _as_float(bias), eps
    )
    return out.to(input.dtype), mean, rstd


@lowering("aten::native_layer_norm_backward")
def _native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, mask):
    if input.dtype not in _REDUCED_FLOATS and mean.dtype == input.dtype:
        return _native_layer_norm_backward_cpu(
            grad_out, input, normalized_shape, mean, rstd, weight, bias, mask
        )
    grads = _native_layer_norm_backward_cpu(
        grad_out.float(),
        input.float(),
        normalized_shape,
        mean.float(),
        rstd.float(),
        _as_float(weight),
        _as_float(bias),
        mask,
    )
    like = (input, weight, bias)
    return tuple(None if g is None else g.to(t.dtype) for g, t in zip(grads, like, strict=True))


# nn.TransformerEncoderLayer's and nn.MultiheadAttention's inference fast path;
# nn.TransformerEncoder's check of a padding mask before it packs the batch into a
# NestedTensor (which emu refuses as an unsupported feature).
lower("aten::_transformer_encoder_layer_fwd", "aten::_native_multi_head_attention")
lower("aten::_nested_tensor_from_mask_left_aligned")
lower("aten::native_batch_norm_backward")
lower("aten::_native_batch_norm_legit.no_stats")


def _eval_saved_stats(result, input, running_mean, running_var, eps):
    """Batch norm's saved statistics in eval mode as every device but the CPU returns them,
    and as torch's fake tensors and decompositions model a non-CPU device (so compiled code
    expects them): the running mean and 1/sqrt(running_var + eps), in the computation
    dtype. The CPU kernel returns empty tensors instead."""
    if running_mean is None or running_var is None:
        return result
    return (result[0], *_eval_stats(input, running_mean, running_var, eps))


def _eval_stats(input, running_mean, running_var, eps):
    dtype = torch.float32 if input.dtype in (torch.float16, torch.bfloat16) else input.dtype
    return running_mean.to(dtype, copy=True), (running_var.to(dtype) + eps).rsqrt()


def _eval_stats_out(derived, args, out, save_mean, save_invstd):
    """The ``.out`` variants in eval mode: the CPU kernel writes ``out`` (its saved
    statistics go to scratch tensors), then the statistics are written as
    :func:`_eval_saved_stats` gives them, resizing the outs as ATen's resize_output does."""
    input, _, _, running_mean, running_var, _, _, eps = args
    derived(*args, out=out, save_mean=save_mean.new_empty(0), save_invstd=save_invstd.new_empty(0))
    for target, value in zip(
        (save_mean, save_invstd), _eval_stats(input, running_mean, running_var, eps), strict=True
    ):
        if target.shape != value.shape:
            if target.numel():
                warnings.warn(
                    f"An output with one or more elements was resized since it had shape "
                    f"{list(target.shape)}, which does not match the required output shape "
                    f"{list(value.shape)}. Resizing outputs that are not empty is deprecated; "
                    "pass an empty out= tensor or one of the result's shape.",
                    stacklevel=2,
                )
            target.resize_(value.shape)
        target.copy_(value)
    return out, save_mean, save_invstd


def _with_eval_stats(op):
    """The derived kernel of a batch norm with a ``training`` flag, returning
    :func:`_eval_saved_stats` in eval mode."""
    derived = derived_kernel(op)

    def kernel(input, weight, bias, running_mean, running_var, training, momentum, eps):
        result = derived(input, weight, bias, running_mean, running_var, training, momentum, eps)
        if training:
            return result
        return _eval_saved_stats(result, input, running_mean, running_var, eps)

    return kernel


def _with_eval_stats_out(op):
    """The same for the ``.out`` variants (see :func:`_eval_stats_out`)."""
    derived = derived_kernel(op)

    def kernel(*args, out, save_mean, save_invstd):
        if args[5]:  # training
            return derived(*args, out=out, save_mean=save_mean, save_invstd=save_invstd)
        return _eval_stats_out(derived, args, out, save_mean, save_invstd)

    return kernel


lowering("aten::native_batch_norm")(_with_eval_stats(torch.ops.aten.native_batch_norm.default))
lowering("aten::_native_batch_norm_legit")(
    _with_eval_stats(torch.ops.aten._native_batch_norm_legit.default)
)
lowering("aten::native_batch_norm.out")(_with_eval_stats_out(torch.ops.aten.native_batch_norm.out))
lowering("aten::_native_batch_norm_legit.out")(
    _with_eval_stats_out(torch.ops.aten._native_batch_norm_legit.out)
)
_batch_norm_no_training = derived_kernel(
    torch.ops.aten._native_batch_norm_legit_no_training.default
)


@lowering("aten::_native_batch_norm_legit_no_training")
def native_batch_norm_no_training(input, weight, bias, running_mean, running_var, momentum, eps):
    result = _batch_norm_no_training(input, weight, bias, running_mean, running_var, momentum, eps)
    return _eval_saved_stats(result, input, running_mean, running_var, eps)


# convolution and _convolution are CompositeExplicitAutograd, but their composites
# route unknown backends to convolution_overrideable; lowering them runs the CPU ones.
lower("aten::convolution", "aten::convolution_backward", "aten::_convolution")
lower("aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices.out")
lower("aten::max_pool2d_with_indices_backward", "aten::max_pool2d_with_indices_backward.grad_input")
lower("aten::avg_pool2d", "aten::avg_pool2d.out")
lower("aten::avg_pool2d_backward", "aten::avg_pool2d_backward.grad_input")
lower("aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d_backward")

# embedding itself is composite (index_select after its argument checks): lowering it
# would run the device check before them, as no other device does.
lower("aten::embedding_dense_backward")
if plants.is_active("device_check_first"):
    lower("aten::embedding")
lower("aten::nll_loss_forward", "aten::nll_loss_forward.output")
lower("aten::nll_loss_backward", "aten::nll_loss_backward.grad_input")
lower("aten::nll_loss2d_forward", "aten::nll_loss2d_forward.output")
lower("aten::nll_loss2d_backward", "aten::nll_loss2d_backward.grad_input")
lower("aten::mse_loss", "aten::mse_loss.out")
lower("aten::mse_loss_backward", "aten::mse_loss_backward.grad_input")
lower("aten::binary_cross_entropy", "aten::binary_cross_entropy.out")
lower("aten::binary_cross_entropy_backward", "aten::binary_cross_entropy_backward.grad_input")
lower("aten::smooth_l1_loss", "aten::smooth_l1_loss.out")
lower("aten::smooth_l1_loss_backward", "aten::smooth_l1_loss_backward.grad_input")

lower("aten::native_dropout_backward")


@lowering("aten::native_dropout")
def native_dropout(input: torch.Tensor, p: float, train: bool | None) -> Any:
    # The CPU kernel draws its mask from the CPU default generator, which has
    # no argument to swap: lend it the emu generator's state for the call.
    device = input.device.index
    alias = torch.ops.emu.cpu_aliases.default([input], [False])[0]
    device_gen, write_back = device_generator_state(None, device)
    saved = torch.default_generator.get_state()
    torch.default_generator.set_state(device_gen.get_state())
    try:
        result = torch.ops.aten.native_dropout.default(alias, p, train)
        device_gen.set_state(torch.default_generator.get_state())
    finally:
        torch.default_generator.set_state(saved)
    write_back()
    return on_device(result, device)


# Padding, pooling and upsampling ranked by triage.
lower("aten::reflection_pad1d", "aten::reflection_pad1d.out")
lower("aten::replication_pad1d", "aten::replication_pad1d.out")
lower("aten::replication_pad2d", "aten::replication_pad2d.out")
lower("aten::max_unpool2d", "aten::max_unpool2d.out")
lower("aten::adaptive_max_pool2d", "aten::adaptive_max_pool2d.out")
lower("aten::_adaptive_avg_pool3d")
lower("aten::avg_pool3d", "aten::avg_pool3d.out")
lower("aten::max_pool3d_with_indices", "aten::max_pool3d_with_indices.out")
lower("aten::upsample_bilinear2d", "aten::upsample_bilinear2d.out")
lower("aten::upsample_nearest1d", "aten::upsample_nearest1d.out")
lower("aten::log_sigmoid_forward", "aten::log_sigmoid_forward.output")
lower("aten::channel_shuffle")
# Their backward kernels, and the next sizes of the same families.
lower("aten::reflection_pad1d_backward", "aten::reflection_pad1d_backward.grad_input")
lower("aten::reflection_pad2d", "aten::reflection_pad2d.out")
lower("aten::reflection_pad2d_backward", "aten::reflection_pad2d_backward.grad_input")
lower("aten::replication_pad1d_backward", "aten::replication_pad1d_backward.grad_input")
lower("aten::replication_pad2d_backward", "aten::replication_pad2d_backward.grad_input")
lower("aten::replication_pad3d", "aten::replication_pad3d.out")
lower("aten::replication_pad3d_backward", "aten::replication_pad3d_backward.grad_input")
lower("aten::adaptive_max_pool2d_backward", "aten::adaptive_max_pool2d_backward.grad_input")
lower("aten::adaptive_max_pool3d", "aten::adaptive_max_pool3d.out")
lower("aten::_adaptive_avg_pool3d_backward")
lower("aten::avg_pool3d_backward", "aten::avg_pool3d_backward.grad_input")
lower("aten::max_pool3d_with_indices_backward", "aten::max_pool3d_with_indices_backward.grad_input")
lower("aten::upsample_nearest1d_backward", "aten::upsample_nearest1d_backward.grad_input")
lower("aten::upsample_nearest2d", "aten::upsample_nearest2d.out")
lower("aten::upsample_nearest2d_backward", "aten::upsample_nearest2d_backward.grad_input")
lower("aten::upsample_bilinear2d_backward", "aten::upsample_bilinear2d_backward.grad_input")
lower("aten::_upsample_bilinear2d_aa", "aten::_upsample_bilinear2d_aa.out")
lower("aten::_upsample_bilinear2d_aa_backward", "aten::_upsample_bilinear2d_aa_backward.grad_input")
lower("aten::log_sigmoid_backward", "aten::log_sigmoid_backward.grad_input")
lower("aten::reflection_pad3d", "aten::reflection_pad3d.out")
lower("aten::reflection_pad3d_backward", "aten::reflection_pad3d_backward.grad_input")
lower("aten::upsample_nearest3d", "aten::upsample_nearest3d.out")
lower("aten::upsample_nearest3d_backward", "aten::upsample_nearest3d_backward.grad_input")
lower("aten::upsample_trilinear3d", "aten::upsample_trilinear3d.out")
lower("aten::upsample_trilinear3d_backward", "aten::upsample_trilinear3d_backward.grad_input")
lower("aten::upsample_bicubic2d", "aten::upsample_bicubic2d.out")
lower("aten::upsample_bicubic2d_backward", "aten::upsample_bicubic2d_backward.grad_input")
lower("aten::upsample_linear1d", "aten::upsample_linear1d.out")
lower("aten::upsample_linear1d_backward", "aten::upsample_linear1d_backward.grad_input")

# Activations, losses, pooling, sampling and embedding bags ranked by triage, with their
# backward kernels.
lower("aten::max_unpool3d", "aten::max_unpool3d.out")
lower(
    "aten::hardshrink.out",
    "aten::hardshrink",
    "aten::hardshrink_backward",
    "aten::hardshrink_backward.grad_input",
)
lower(
    "aten::softshrink.out",
    "aten::softshrink",
    "aten::softshrink_backward",
    "aten::softshrink_backward.grad_input",
)
lower("aten::im2col", "aten::im2col.out", "aten::col2im", "aten::col2im.out")
lower("aten::grid_sampler_2d", "aten::grid_sampler_2d_backward")
lower("aten::segment_reduce", "aten::_segment_reduce_backward")
lower("aten::huber_loss", "aten::huber_loss.out")
lower("aten::mish.out", "aten::mish", "aten::mish_")
lower("aten::_prelu_kernel", "aten::_prelu_kernel_backward")
lower(
    "aten::glu.out",
    "aten::glu",
    "aten::glu_backward",
    "aten::glu_backward.grad_input",
    "aten::glu_jvp",
    "aten::glu_backward_jvp",
)
lower("aten::hardswish", "aten::hardswish.out", "aten::hardswish_", "aten::hardswish_backward")
lower(
    "aten::multi_margin_loss",
    "aten::multi_margin_loss.out",
    "aten::multi_margin_loss_backward",
    "aten::multi_margin_loss_backward.grad_input",
)
lower(
    "aten::multilabel_margin_loss_forward",
    "aten::multilabel_margin_loss_backward",
    "aten::multilabel_margin_loss_backward.grad_input",
)
lower("aten::_ctc_loss", "aten::_ctc_loss_backward")
lower(
    "aten::hardsigmoid.out",
    "aten::hardsigmoid",
    "aten::hardsigmoid_",
    "aten::hardsigmoid_backward",
    "aten::hardsigmoid_backward.grad_input",
)
lower(
    "aten::_upsample_nearest_exact1d.out",
    "aten::_upsample_nearest_exact1d",
    "aten::_upsample_nearest_exact1d_backward",
    "aten::_upsample_nearest_exact1d_backward.grad_input",
)
lower(
    "aten::fractional_max_pool2d.output",
    "aten::fractional_max_pool2d",
    "aten::fractional_max_pool2d_backward",
    "aten::fractional_max_pool2d_backward.grad_input",
)
lower(
    "aten::fractional_max_pool3d.output",
    "aten::fractional_max_pool3d",
    "aten::fractional_max_pool3d_backward",
    "aten::fractional_max_pool3d_backward.grad_input",
)
lower("aten::_batch_norm_with_update", "aten::_batch_norm_with_update.out")
lower("aten::grid_sampler_3d", "aten::grid_sampler_3d_backward")
lower("aten::rrelu_with_noise", "aten::rrelu_with_noise.out", "aten::rrelu_with_noise_")
lower("aten::_cdist_forward", "aten::_cdist_backward")
lower("aten::_pdist_forward", "aten::_pdist_backward")
lower("aten::_embedding_bag_forward_only")
lower("aten::_embedding_bag", "aten::_embedding_bag_backward")
lower("aten::native_group_norm_backward")
_native_group_norm_cpu = derived_kernel(resolve("aten::native_group_norm"))


def _dense_in_own_format(t: torch.Tensor | None) -> torch.Tensor | None:
    """``t`` itself if dense in the contiguous or its channels-last format, else a contiguous copy."""
    if t is None or t.is_contiguous():
        return t
    for dim, fmt in ((4, torch.channels_last), (5, torch.channels_last_3d)):
        if t.dim() == dim and t.is_contiguous(memory_format=fmt):
            return t
    return t.contiguous()


@lowering("aten::native_group_norm")
def _native_group_norm(input, weight, bias, *sizes_group_eps):
    # The CPU kernel refuses an input that is not dense in its memory format (the CPU's
    # own group_norm makes it so first); accelerators take any strides.
    dense = _dense_in_own_format
    return _native_group_norm_cpu(dense(input), dense(weight), dense(bias), *sizes_group_eps)


lower("aten::_upsample_nearest_exact2d", "aten::_upsample_nearest_exact2d.out")
lower(
    "aten::_upsample_nearest_exact2d_backward",
    "aten::_upsample_nearest_exact2d_backward.grad_input",
)
lower("aten::_upsample_nearest_exact3d", "aten::_upsample_nearest_exact3d.out")
lower(
    "aten::_upsample_nearest_exact3d_backward",
    "aten::_upsample_nearest_exact3d_backward.grad_input",
)
lower("aten::huber_loss_backward.out")
lower("aten::embedding_renorm_")
lower("aten::_embedding_bag_per_sample_weights_backward")
lower("aten::batch_norm_backward")
lower("aten::_native_batch_norm_legit.no_stats_out")
lower("aten::adaptive_max_pool3d_backward", "aten::adaptive_max_pool3d_backward.grad_input")
lower("aten::_upsample_bicubic2d_aa", "aten::_upsample_bicubic2d_aa.out")
lower("aten::_upsample_bicubic2d_aa_backward", "aten::_upsample_bicubic2d_aa_backward.grad_input")
lower("aten::_upsample_lanczos2d_aa.out", "aten::_upsample_lanczos2d_aa_backward.grad_input")
lower("aten::adaptive_avg_pool2d.out", "aten::adaptive_avg_pool3d.out")
lower("aten::adaptive_avg_pool3d_backward.grad_input")
lower("aten::multilabel_margin_loss_forward.output")
lower("aten::_masked_softmax", "aten::_masked_softmax_backward")
lower("aten::_weight_norm_interface", "aten::_weight_norm_interface_backward")
lower("aten::batch_norm_update_stats")
lower("aten::_embedding_bag_dense_backward")
lower("aten::_transform_bias_rescale_qkv")
