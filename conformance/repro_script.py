"""The standalone script ``conformance repro`` writes for a failing OpInfo or ModuleInfo test.

The script rebuilds the failing sample the way the test drew it, runs it on the device and
on the CPU, and shows the difference or the exception. It needs only torch and the backend:
the harness is not imported, so it can be mailed to whoever owns the kernel. It exits 0
when the device agrees with the CPU, 1 when it does not.

How the sample is rebuilt follows the suite:

- the embedded suite draws from the OpInfo or ModuleInfo database on the CPU, from the
  suite's seed, and moves the sample to the device;
- upstream's templates draw on the device through the OpInfo's ``sample_inputs``,
  ``reference_inputs`` or ``error_inputs``, which seed every input from the qualified name
  of the test function (``TestCommon.test_out``); the script calls them from a test case
  of that name, with the arguments the template passes (:data:`UPSTREAM_TEMPLATES`).

What a script checks follows the template that failed:

- forward templates (``test_compare_cpu``, ``test_out``, ``test_out_warning``,
  ``test_variant_consistency_eager``, ``test_noncontiguous_samples``): the op's result on
  the device against the CPU's, then what the template adds (``out=``, and for upstream's
  ``test_out`` an ``out=`` on the wrong device; the method and in-place variants; a
  non-contiguous copy of the sample), and the grads where the template computes them;
- grad templates (the suite's ``test_fn_grad_compare_cpu``, upstream's ``test_fn_grad``
  and ``test_fn_gradgrad``): grads for a seeded cotangent, device against CPU (upstream
  gradchecks on the device instead; a wrong derivative shows in both);
- ``test_forward_mode_AD``: gradcheck of the forward-mode derivative on the device;
- ``test_errors``: the error input raises the exception and message the OpInfo documents;
- ModuleInfo templates of the suite (``test_forward``, ``test_cpu_gpu_parity``): the
  module's forward (and grads of inputs and parameters) against an identical module on
  the CPU. Upstream's ModuleInfo templates expose no input index, so they get none.
"""

from __future__ import annotations

import re
import string
from typing import Any, NamedTuple

from conformance.errors import ConfigError

__all__ = ["SCRIPT_TEMPLATES", "UPSTREAM_TEMPLATES", "script_for", "script_name"]

#: Template of the embedded suite -> the kind of check its script makes.
SCRIPT_TEMPLATES = {
    "test_compare_cpu": "forward",
    "test_out": "forward",
    "test_out_warning": "forward",
    "test_variant_consistency_eager": "forward",
    "test_noncontiguous_samples": "forward",
    "test_fn_grad_compare_cpu": "grad",
    "test_forward_mode_AD": "forward_ad",
    "test_errors": "errors",
    "test_forward": "module",
    "test_cpu_gpu_parity": "module",
}


class UpstreamDraw(NamedTuple):
    """How an upstream template draws its inputs: the kind of check the script makes, the
    OpInfo method it calls (``sample``, ``reference`` or ``error`` inputs), and Python
    expressions (over ``op``, ``DTYPE`` and ``device_type``) for ``requires_grad`` and for
    whether complex samples come conjugated too."""

    kind: str
    inputs: str = "sample"
    requires_grad: str = "False"
    conjugated: str = "False"


_BACKWARD = "DTYPE in op.supported_backward_dtypes(device_type)"
_CONJUGATED = "op.test_conjugated_samples and DTYPE.is_complex"

#: Upstream templates (test_ops.py, test_ops_gradients.py, test_ops_fwd_gradients.py as of
#: torch 2.13) a script is written for, and how each draws its inputs.
UPSTREAM_TEMPLATES = {
    "test_compare_cpu": UpstreamDraw("forward", "reference"),
    "test_out": UpstreamDraw("forward"),
    "test_out_warning": UpstreamDraw("forward"),
    "test_noncontiguous_samples": UpstreamDraw("forward", requires_grad=_BACKWARD),
    "test_variant_consistency_eager": UpstreamDraw(
        "forward", requires_grad=_BACKWARD, conjugated=_CONJUGATED
    ),
    "test_errors": UpstreamDraw("errors", "error"),
    "test_fn_grad": UpstreamDraw("grad", requires_grad="True", conjugated=_CONJUGATED),
    "test_fn_gradgrad": UpstreamDraw("grad", requires_grad="True", conjugated=_CONJUGATED),
    "test_forward_mode_AD": UpstreamDraw(
        "forward_ad", requires_grad="True", conjugated=_CONJUGATED
    ),
}

#: The embedded suite's seed (conformance.embedded._samples.SEED), written into scripts.
#: (Selections only cut the list of samples short, so an index names the same sample in
#: every selection; the full selection's reference inputs come after the samples.)
_SEED = 1234


def script_name(record: dict[str, Any]) -> str:
    """A file name for the record's script: ``repro_<test name>.py``."""
    name = str(record["test_id"]).rsplit("::", 1)[-1]
    return "repro_" + re.sub(r"[^\w]+", "_", name) + ".py"


def script_for(record: dict[str, Any], *, device: str, selection: str, backend_module: str) -> str:
    """The script's text for ``record``, a failing test on ``device``.

    ConfigError when the test has no standalone repro: a template without samples
    (``test_dtypes``, the optimizer templates, whose message already names what fails)
    or one this module does not know, or no recorded sample index."""
    template = str(record["template"])
    where = str(record["test_id"])
    upstream = record.get("suite") != "embedded"
    known = UPSTREAM_TEMPLATES if upstream else SCRIPT_TEMPLATES
    if template not in known:
        suite = "upstream" if upstream else "the embedded suite"
        raise ConfigError(
            f"template {template} of {suite} has no standalone script (known: "
            f"{', '.join(known)}); run the printed command",
            where=where,
        )
    index = int(record.get("sample_index", -1))
    if index < 0:
        raise ConfigError(
            "the record names no failing sample (it did not fail inside a sample, or the run "
            "predates sample indices)",
            where=where,
        )
    fields = {
        "test_id": where,
        "outcome": f"{record['outcome']} ({record['category']} {record['detail']})".rstrip(),
        "message": _first_line(str(record.get("message", ""))),
        "import_backend": f"import {backend_module}  # registers the device"
        if backend_module
        else "",
        "device": repr(device),
        "op": repr(str(record["op"])),
        "dtype": repr(str(record["dtype"])),
        "index": repr(index),
        "template": repr(template),
        "suite": repr("upstream" if upstream else "embedded"),
        "seed": repr(_SEED),
    }
    if upstream:
        draw = UPSTREAM_TEMPLATES[template]
        test_class = str(record["test_class"])
        fields["drawn_as"] = f"upstream's {test_class}.{template} does (on the device)"
        fields["draw"] = string.Template(_UPSTREAM_DRAW).substitute(
            test_class=repr(test_class),
            requires_grad=draw.requires_grad,
            conjugated=draw.conjugated,
            reference=repr(draw.inputs == "reference"),
        )
    else:
        fields["drawn_as"] = f"the conformance suite does (on the CPU, seed {_SEED})"
        fields["draw"] = string.Template(_EMBEDDED_DRAW).substitute(
            reference=repr(template == "test_compare_cpu" and selection == "full")
        )
        fields["training"] = repr(str(record.get("params", "")) != "training=False")
    body = _MODULE_BODY if SCRIPT_TEMPLATES.get(template) == "module" and not upstream else _OP_BODY
    return string.Template(_HEAD + body).substitute(fields)


def _first_line(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line[:200].replace('"""', "'''")


_HEAD = '''\
#!/usr/bin/env python3
"""Repro of $test_id

Recorded as: $outcome
$message

Rebuilds the failing sample from its database in the torch wheel, as $drawn_as,
runs it on the device and on the CPU, and prints what differs. Needs torch and the
backend only. Exit 0: the device agrees with the CPU.
"""

import sys

import torch
from torch.utils._pytree import tree_flatten, tree_map

$import_backend

DEVICE = $device
DTYPE = getattr(torch, $dtype) if $dtype else None  # test_errors runs without a dtype
INDEX = $index
TEMPLATE = $template
SUITE = $suite
SEED = $seed

failures = []


def check(what, run):
    """Run one comparison; print and remember how it went."""
    try:
        run()
    except Exception as exc:  # the repro reports every failure, whatever its type
        failures.append(what)
        print(f"FAIL  {what}: {type(exc).__name__}: {exc}")
    else:
        print(f"ok    {what}")


def moved(value, device):
    """``value`` with every tensor copied to ``device`` (requires_grad kept)."""

    def move(x):
        if isinstance(x, torch.Tensor):
            return x.detach().to(device).requires_grad_(x.requires_grad)
        return x

    return tree_map(move, value)


def on_cpu(value):
    return tree_map(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, value)


def same(actual, expected):
    torch.testing.assert_close(on_cpu(actual), on_cpu(expected), equal_nan=True)


def cotangent_grads(outputs, inputs):
    """Grads of ``inputs`` for a seeded random cotangent drawn on the CPU."""
    outputs = [t for t in tree_flatten(outputs)[0] if isinstance(t, torch.Tensor)]
    outputs = [t for t in outputs if t.requires_grad]
    if not outputs or not inputs:
        return []
    generator = torch.Generator().manual_seed(SEED)
    cotangents = [
        torch.randn(t.shape, dtype=t.dtype, generator=generator).to(t.device) for t in outputs
    ]
    grads = torch.autograd.grad(outputs, inputs, cotangents, allow_unused=True)
    return [None if g is None else g.detach().cpu() for g in grads]

'''

_EMBEDDED_DRAW = """
REFERENCE = $reference  # the full selection adds the OpInfo's reference inputs
requires_grad = TEMPLATE in ("test_fn_grad_compare_cpu", "test_forward_mode_AD") or (
    TEMPLATE in ("test_variant_consistency_eager", "test_noncontiguous_samples")
    and op.supports_autograd
    and DTYPE in op.supported_backward_dtypes(device_type)
)
torch.manual_seed(SEED)
if TEMPLATE == "test_errors":
    inputs = op.error_inputs_func(op, DEVICE)
else:
    inputs = op.sample_inputs_func(op, "cpu", DTYPE, requires_grad)
    if REFERENCE and op.reference_inputs_func is not None:
        import itertools

        more = op.reference_inputs_func(op, "cpu", DTYPE, requires_grad)
        inputs = itertools.chain(inputs, more)
drawn = next((x for i, x in enumerate(inputs) if i == INDEX), None)
"""

_UPSTREAM_DRAW = '''
import unittest

from torch.testing._internal.common_utils import set_rng_seed

TEST_CLASS = $test_class
requires_grad = $requires_grad
conjugated = $conjugated  # complex dtypes add the conjugated samples


def draw(self):
    """The inputs as the upstream template draws them, on the device."""
    set_rng_seed()  # what upstream's TestCase.setUp does
    if TEMPLATE == "test_errors":
        inputs = op.error_inputs(DEVICE)
    elif $reference:
        inputs = op.reference_inputs(DEVICE, DTYPE, requires_grad=requires_grad)
    else:
        extra = {"include_conjugated_inputs": True} if conjugated else {}
        inputs = op.sample_inputs(DEVICE, DTYPE, requires_grad=requires_grad, **extra)
    return next((x for i, x in enumerate(inputs) if i == INDEX), None)


# Upstream seeds each input from the qualified name of the test function it finds on the
# stack (TrackedInputIter): a test case of the template's class and name draws the same.
draw.__name__, draw.__qualname__ = TEMPLATE, f"{TEST_CLASS}.{TEMPLATE}"
drawn = getattr(type(TEST_CLASS, (unittest.TestCase,), {TEMPLATE: draw})(TEMPLATE), TEMPLATE)()
'''

_OP_BODY = '''
import os

os.environ.pop("PYTORCH_OPINFO_SAMPLE_INPUT_INDEX", None)  # the script picks its sample itself
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

OP = $op

op = next(o for o in op_db if o.full_name == OP)
device_type = torch.device(DEVICE).type
$draw
if TEMPLATE == "test_errors":
    if drawn is None:
        sys.exit(f"{OP} has no error input {INDEX}: is this the torch the run used?")
    error, sample = drawn, drawn.sample_input
    print(f"error input {INDEX} of {OP}: {sample.summary()}")
    print(f"expected: {error.error_type.__name__} matching {error.error_regex!r}")

    def raises():
        try:
            op(sample.input, *sample.args, **sample.kwargs)
        except error.error_type as exc:
            import re

            if not re.search(error.error_regex, str(exc)):
                raise AssertionError(f"raised {exc!r}, which does not match") from exc
        else:
            raise AssertionError("raised nothing")

    check("the error input raises", raises)
    sys.exit(1 if failures else 0)

if drawn is None:
    sys.exit(f"{OP} has no sample {INDEX} in {DTYPE}: is this the torch the run used?")
print(f"sample {INDEX} of {OP} in {DTYPE}: {drawn.summary()}")


def on(device, sample=drawn):
    """The sample on ``device``: tensors copied, a device= keyword renamed."""
    copy = sample.transform(lambda x: moved(x, device))
    if isinstance(copy.kwargs.get("device"), (str, torch.device)):
        copy.kwargs["device"] = device
    return copy


def call(fn, sample, **extra):
    torch.manual_seed(SEED)  # random ops draw the same numbers on both sides
    return fn(sample.input, *sample.args, **sample.kwargs, **extra)


def leaves(sample):
    found = tree_flatten((sample.input, sample.args, sample.kwargs))[0]
    return [t for t in found if isinstance(t, torch.Tensor) and t.requires_grad]


reference = on("cpu")
device_sample = on(DEVICE)
expected = reference.output_process_fn_grad(call(op, reference))
actual = None


def forward():
    global actual
    actual = device_sample.output_process_fn_grad(call(op, device_sample))
    same(actual, expected)


if TEMPLATE != "test_forward_mode_AD":
    check(f"{OP} on {DEVICE} equals the CPU", forward)

if TEMPLATE == "test_out" and isinstance(expected, torch.Tensor):

    def out():
        target = torch.empty_like(expected, device=DEVICE).fill_(0)
        call(op, device_sample, out=target)
        same(target, expected)

    check("out= on the device is written with the result", out)

if TEMPLATE == "test_out" and SUITE == "upstream" and DEVICE != "cpu":

    def wrong_device():
        try:
            call(op, device_sample, out=torch.empty_like(on_cpu(expected)))
        except RuntimeError:
            return
        raise AssertionError(f"no RuntimeError with input.device={DEVICE} and out.device=cpu")

    if isinstance(expected, torch.Tensor):
        check("out= on the CPU is refused for inputs on the device", wrong_device)

if TEMPLATE == "test_noncontiguous_samples":
    check(
        "a non-contiguous copy gives the same result",
        lambda: same(call(op, device_sample.noncontiguous()), expected),
    )

if TEMPLATE == "test_variant_consistency_eager":
    for name, variant in (("method", op.method_variant), ("in-place", op.inplace_variant)):
        if variant is None:
            continue
        if name == "in-place":
            if not isinstance(expected, torch.Tensor) or expected.dtype != DTYPE:
                continue
            target = on(DEVICE)
            target.input = target.input.detach().clone()
            check(f"the {name} variant equals the CPU", lambda: same(call(variant, target), expected))
        else:
            check(
                f"the {name} variant equals the CPU",
                lambda: same(call(variant, device_sample), expected),
            )

if requires_grad and TEMPLATE != "test_forward_mode_AD":

    def grads():
        got = device_sample.output_process_fn_grad(call(op, device_sample))
        want = cotangent_grads(expected, leaves(reference))
        same(cotangent_grads(got, leaves(device_sample)), want)

    check("grads on the device equal the CPU's", grads)

if TEMPLATE == "test_forward_mode_AD":
    flat, spec = tree_flatten((device_sample.input, device_sample.args, device_sample.kwargs))
    positions = [i for i, x in enumerate(flat) if isinstance(x, torch.Tensor) and x.requires_grad]

    def fn(*tensors):
        rebuilt = list(flat)
        for position, tensor in zip(positions, tensors):
            rebuilt[position] = tensor
        from torch.utils._pytree import tree_unflatten

        inp, args, kwargs = tree_unflatten(rebuilt, spec)
        return device_sample.output_process_fn_grad(
            op.gradcheck_wrapper(op.get_op(), inp, *args, **kwargs)
        )

    check(
        "forward-mode AD on the device passes gradcheck",
        lambda: torch.autograd.gradcheck(
            fn,
            tuple(flat[i] for i in positions),
            check_forward_ad=True,
            check_backward_ad=False,
            check_undefined_grad=False,
            check_batched_grad=False,
            check_batched_forward_grad=op.check_batched_forward_grad,
            nondet_tol=op.gradcheck_nondet_tol,
        ),
    )

sys.exit(1 if failures else 0)
'''

_MODULE_BODY = """
import copy

from torch.testing._internal.common_modules import module_db

MODULE = $op
TRAINING = $training

module_info = next(m for m in module_db if m.name == MODULE)
requires_grad = TEMPLATE == "test_cpu_gpu_parity"
torch.manual_seed(SEED)
inputs = module_info.module_inputs_func(
    module_info, device="cpu", dtype=DTYPE, requires_grad=requires_grad, training=TRAINING
)
inputs = [i for i in inputs if i.forward_input is not None]
if INDEX >= len(inputs):
    sys.exit(f"{MODULE} has no input {INDEX} in {DTYPE}: is this the torch the run used?")
module_input = inputs[INDEX]
print(f"module input {INDEX} of {MODULE} in {DTYPE}: {module_input.desc or '(no description)'}")


def forward(module, device):
    args = moved(module_input.forward_input.args, device)
    kwargs = moved(module_input.forward_input.kwargs, device)
    torch.manual_seed(SEED)  # modules that draw random numbers draw the same ones
    return module(*args, **kwargs), args, kwargs


ctor = module_input.constructor_input
torch.manual_seed(SEED)
cpu_module = module_info.module_cls(*ctor.args, **ctor.kwargs).to(DTYPE)
cpu_module.train(TRAINING)
with torch.no_grad():
    forward(cpu_module, "cpu")  # materializes lazy modules
device_module = copy.deepcopy(cpu_module).to(DEVICE)


def grad_leaves(module, args, kwargs):
    inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
    inputs = [t for t in inputs if t.requires_grad]
    return inputs + [p for p in module.parameters() if p.requires_grad]


with torch.set_grad_enabled(requires_grad):
    expected, cpu_args, cpu_kwargs = forward(cpu_module, "cpu")
    outcome = {}

    def run_forward():
        outcome["actual"], outcome["args"], outcome["kwargs"] = forward(device_module, DEVICE)
        same(outcome["actual"], expected)

    check(f"{MODULE} forward on {DEVICE} equals the CPU", run_forward)
    if requires_grad and "actual" in outcome:
        check(
            "grads of inputs and parameters equal the CPU's",
            lambda: same(
                cotangent_grads(
                    outcome["actual"],
                    grad_leaves(device_module, outcome["args"], outcome["kwargs"]),
                ),
                cotangent_grads(expected, grad_leaves(cpu_module, cpu_args, cpu_kwargs)),
            ),
        )

sys.exit(1 if failures else 0)
"""
