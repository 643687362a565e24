"""A fake CUDA device for a machine without a GPU: code runs as if on `cuda:0`, every tensor on it
computes on the CPU, and an operation that mixes it with a CPU tensor raises as a GPU would.

    with FakeCuda():
        model, tokenizer = minillm.load(folder, device="auto")   # lands on cuda:0
        minillm.generate(model, tokenizer, "Hi", max_new_tokens=5)

PyTorch's FakeTensorMode checks devices too, but its tensors hold no values, so it stops at the
first host sync (`.item()`, `.tolist()`, `if mask.any():`), which every generation loop makes.
Here a tensor on the fake device (`FakeCudaTensor`) wraps a real CPU tensor (`.elem`); a dispatch
mode runs each ATen operation on the wrapped CPU tensors, after the device check a GPU makes, and
wraps the results again. While the harness is active:

- factories given a cuda device (`torch.zeros(..., device="cuda")`, `torch.tensor(...)`), and
  `.to("cuda")`, `.cuda()`, `Module.to("cuda")`, give FakeCudaTensors that report `cuda:0`;
- an operation whose tensors are on both devices raises RuntimeError("Expected all tensors to be
  on the same device ..."), except where CUDA allows it: a 0-dim CPU tensor as an operand, CPU
  index tensors in indexing, and copies (`copy_`, `t[:2] = cpu_tensor`);
- `.cpu()` / `.to("cpu")` give real CPU tensors; `.item()`, `.tolist()`, `bool(t)`, `int(t)`
  work (a host sync); `.numpy()` (so `np.asarray`, matplotlib) raises TypeError as on a GPU;
- `.data_ptr()` asked by minillm's CPU kernels (a module under `minillm.kernels`) raises
  RuntimeError("CUDA pointer passed to a CPU kernel ..."): on a GPU that address points into the
  GPU's memory and the C code would crash the process; asked by anything else it answers;
- host synchronizations are counted by kind (`host_syncs()`, `Tally`): value reads (`.item()`,
  `bool(t)`, `.tolist()`), boolean-mask indexing and `nonzero`, pageable host-to-device and
  device-to-host copies, `torch.cuda.synchronize`; `t.pin_memory()` gives a tensor whose
  `non_blocking=True` copy to the device is not one. `cuda_ops()` counts ATen operations, a
  proxy for kernel launches;
- `torch.cuda.is_available()` is True (so `minillm.utils.devices.pick_device("auto")` is cuda), and
  `torch.cuda.synchronize`, `get_device_name`, `manual_seed_all` and `Event` work;
- `torch.Generator(device="cuda")` gives a `FakeCudaGenerator` (a CPU generator that reports
  cuda); a random op raises, as on a GPU, when its generator is not on its output's device.

Limits (where a real GPU differs and this harness does not tell):
- speed and memory: everything runs on the CPU, so timings measure the CPU;
- numerics: the CPU's kernels (no TF32, no bf16 tensor cores; the same bits at every batch
  shape); where PyTorch picks an attention kernel by device inside an operation, it gets SDPA's
  math path;
- the 0-dim CPU operand is allowed in every operation (as FakeTensorMode allows it), where a few
  CUDA kernels refuse it;
- a tensor on the fake device never requires grad (a CPU-only PyTorch cannot record autograd
  for a cuda tensor): `requires_grad=True` is ignored there; inference code does not notice;
- in-place operations that change a fake tensor's shape (`resize_`, `unsqueeze_`, ...) and
  `t.data = other` raise;
- `Module.to(...)` swaps each parameter's contents for the moved tensor, in both directions
  (`torch.__future__.set_swap_module_params_on_conversion(True)` while the harness is active):
  the Parameter objects are kept, as on a GPU, but a module that holds a view of its own
  parameter (which pins it) cannot be moved until it lets go of the view;
- the modes are per thread: a thread started (with a `target`) while the harness is active runs
  under it too; a thread started before does not;
- one device, cuda:0; memory statistics are not faked; streams are one queue (waiting is free);
- CUDA graphs (`torch.cuda.CUDAGraph`, `torch.cuda.graph`) record the operations on the fake
  device and replay them on the same tensors (`FakeCudaGraph`): a replay that would read a Python
  value of the capture, a host sync inside a capture, or reading a capture's output before a
  replay shows as it would on a GPU; what a real capture refuses beyond syncs (a CPU operation
  in the middle, a new allocation pool's limits) it does not know;
- once it has run, PyTorch's C++ side counts CUDA as initialised for the rest of the process: a
  real cuda call after the harness fails with "Could not run ... with arguments from the 'CUDA'
  backend" instead of "Torch not compiled with CUDA enabled".

`FakeMps` is the same harness as an Apple GPU (MPS) shows itself: tensors report `mps:0`,
`torch.backends.mps.is_available()` is True and `torch.cuda.is_available()` stays False (so
`pick_device("auto")` is mps), `torch.mps.synchronize` counts its calls (`mps_synchronizations`),
and float64 is refused as the real backend refuses it: making, moving or casting a float64 (or
complex128) tensor onto mps raises TypeError. Its limits are the ones above, and it does not
know which other operations a given macOS lacks.
"""

from __future__ import annotations

import collections
import copy
import sys
import threading
import time
import types
import weakref

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

CUDA = torch.device("cuda", 0)
MPS = torch.device("mps", 0)
CPU = torch.device("cpu")
_FAKE = [CUDA]  # the device the active harness fakes: cuda:0 (FakeCuda) or mps:0 (FakeMps)
DEVICE_NAME = "fake CUDA (computes on the CPU)"
MPS_DEVICE_NAME = "fake Apple GPU (computes on the CPU)"

aten = torch.ops.aten
# CUDA takes CPU index tensors for indexing (it copies them over).
_CPU_INDICES_OK = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
                   aten._index_put_impl_.default}
_CROSS_DEVICE_OK = {aten.copy_.default, aten._copy_from.default,
                    aten._copy_from_and_resize.default}


class FakeCudaTensor(torch.Tensor):
    """A tensor that reports the fake device (cuda:0, or mps:0 under FakeMps) and keeps its
    values in `elem`, a CPU tensor."""

    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor):
        if type(elem) is not torch.Tensor or not elem.is_cpu:
            raise TypeError(f"FakeCudaTensor wraps a plain CPU tensor, got {type(elem).__name__} "
                            f"on {elem.device}")
        if _FAKE[0].type == "mps" and elem.dtype in _NOT_ON_MPS:
            raise TypeError(_MPS_FLOAT64)
        if torch.is_inference_mode_enabled():
            # A wrapper made in inference mode is an inference tensor, and PyTorch then refuses
            # to make it a view of a normal tensor (`weight.t()` under inference_mode): every
            # wrapper is a normal tensor.
            with torch._C._InferenceMode(False):
                out = _wrapper(cls, elem)
        else:
            out = _wrapper(cls, elem)
        out.elem = elem
        return out

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _run(func, args, kwargs or {})

    # A traceable wrapper: Module.to() swaps a parameter's contents with one of these (keeping
    # the Parameter object, so tied weights stay tied) instead of `param.data = ...`, which would
    # change the wrapper's metadata and leave its `elem` behind.
    def __tensor_flatten__(self):
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return FakeCudaTensor(inner["elem"])

    def __repr__(self, *, tensor_contents=None) -> str:
        text = repr(self.elem)
        return text[:-1] + f", device='{_FAKE[0]}')" if text.endswith(")") else text

    def __format__(self, spec: str) -> str:
        if self.dim() == 0:
            return self.item().__format__(spec)
        return object.__format__(self, spec)

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            new = FakeCudaTensor(self.elem.clone())
            memo[id(self)] = new
            new.__dict__.update({k: copy.deepcopy(v, memo) for k, v in self.__dict__.items()
                                 if k != "elem"})
        return memo[id(self)]

    def __reduce_ex__(self, protocol):
        raise TypeError("a fake CUDA tensor cannot be pickled; move it to the CPU first (.cpu())")


def _wrapper(cls, elem):
    return torch.Tensor._make_wrapper_subclass(
        cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(),
        dtype=elem.dtype, layout=elem.layout, device=_FAKE[0], requires_grad=False)


def is_fake_cuda(tensor) -> bool:
    return isinstance(tensor, FakeCudaTensor)


# ---- devices ------------------------------------------------------------------------------

def _device_type(device) -> str | None:
    if isinstance(device, torch.device):
        return device.type
    if isinstance(device, str):
        return device.split(":")[0]
    if isinstance(device, int) and not isinstance(device, bool):  # an int is a CUDA ordinal
        return "cuda"
    return None


def _check_index(device: torch.device) -> None:
    if device.index not in (None, 0):
        raise RuntimeError(f"{device.type.upper()} error: invalid device ordinal ({device}): the "
                           f"fake device harness has one device, {_FAKE[0]}")


def _as_cuda0(arg):
    """`arg` as the fake device (cuda:0 or mps:0) when it names that device type, else
    unchanged. A CPU-only PyTorch cannot resolve a bare "cuda" to cuda:0 itself (it has no CUDA
    device guard)."""
    if isinstance(arg, (str, torch.device)) and _device_type(arg) == _FAKE[0].type:
        try:
            device = torch.device(arg)
        except RuntimeError:
            return arg
        _check_index(device)
        return _FAKE[0]
    return arg


def _mismatch(where, other: torch.device) -> RuntimeError:
    return RuntimeError(f"Expected all tensors to be on the same device, but found at least two "
                        f"devices, {_FAKE[0]} and {other}! (raised by the fake device harness in "
                        f"{where})")


def _tensors(x) -> tuple:
    """The tensors in one argument: a tensor, or a list/tuple of tensors (and None)."""
    if isinstance(x, torch.Tensor):
        return (x,)
    if isinstance(x, (list, tuple)):
        return tuple(t for t in x if isinstance(t, torch.Tensor))
    return ()


def _unwrap(x):
    if not isinstance(x, FakeCudaTensor):
        return x
    if x.elem.dtype != x.dtype or x.elem.shape != x.shape:
        raise RuntimeError(f"a fake CUDA tensor ({x.dtype}, {tuple(x.shape)}) no longer matches "
                           f"its CPU values ({x.elem.dtype}, {tuple(x.elem.shape)}): something "
                           "changed its metadata in place (`tensor.data = ...`?), which the "
                           "harness cannot follow")
    return x.elem


def _wrap(x):
    if isinstance(x, torch.Tensor) and not isinstance(x, FakeCudaTensor):
        return FakeCudaTensor(x)
    return x


def tree_map(fn, x):
    """`fn` on each leaf of what an operation takes and returns (tensors and other values in
    tuples, lists, dicts, named tuples and torch.return_types): torch.utils._pytree.tree_map's
    result on these, at a fraction of its cost, which the harness pays on every operation."""
    kind = type(x)
    if kind is tuple or kind is list:
        return kind([tree_map(fn, v) for v in x])
    if kind is dict:
        return {k: tree_map(fn, v) for k, v in x.items()}
    if hasattr(kind, "_fields"):  # a namedtuple
        return kind(*[tree_map(fn, v) for v in x])
    if hasattr(kind, "n_fields"):  # a structseq: torch.return_types
        return kind([tree_map(fn, v) for v in x])
    return fn(x)  # a leaf; a torch.Size too (pytree gives it back as a plain tuple)


# ---- ATen level: every operation ------------------------------------------------------------

_SCHEMAS: dict = {}


def _schema(func):
    """(position of the `device` argument or None, whether it is keyword-only, and the
    (return index, argument position or name) of each input an op writes and returns)."""
    known = _SCHEMAS.get(func)
    if known is None:
        arguments = func._schema.arguments
        device = next(((i, a.kwarg_only) for i, a in enumerate(arguments)
                       if a.name == "device"), (None, True))
        written = []
        for r, ret in enumerate(func._schema.returns):
            info = ret.alias_info
            if info is None or not info.is_write:
                continue
            for i, a in enumerate(arguments):
                if a.alias_info is not None and a.alias_info.before_set == info.before_set:
                    written.append((r, a.name if a.kwarg_only else i))
                    break
        known = _SCHEMAS[func] = (*device, written)
    return known


def _check_devices(func, args, kwargs, written) -> None:
    """CUDA's rule for an op on a fake CUDA tensor: every other tensor is on cuda too, except a
    0-dim CPU tensor that is only read, and CPU index tensors for indexing."""
    written = {w for _, w in written}
    for where, a in (*enumerate(args), *kwargs.items()):
        if where == 1 and func in _CPU_INDICES_OK:
            continue
        for t in _tensors(a):
            if not isinstance(t, FakeCudaTensor) and t.device.type != "meta" \
                    and (t.dim() > 0 or where in written):
                raise _mismatch(func, t.device)


def _unwrap_all(values, found: list) -> tuple[list, bool]:
    """`values` (an op's arguments) with each fake tensor replaced by its CPU values, and whether
    a plain tensor is among them; appends each fake tensor met to `found`. Arguments are flat:
    a tensor, or a list of tensors (and None)."""
    out, plain = [], False
    for v in values:
        if isinstance(v, FakeCudaTensor):
            found.append(v)
            v = _unwrap(v)
        elif isinstance(v, torch.Tensor):
            plain = True
        elif type(v) in (list, tuple):
            if any(isinstance(t, FakeCudaTensor) for t in v):
                found.extend(t for t in v if isinstance(t, FakeCudaTensor))
                v = type(v)(_unwrap(t) for t in v)
            plain = plain or any(type(t) is torch.Tensor for t in v)
        out.append(v)
    return out, plain


def _run(func, args, kwargs):
    """Run one ATen operation: check devices, compute on the CPU, wrap what lives on cuda."""
    if func is _SDPA_CHOICE:
        return 0  # SDPA's math path, which the CPU runs for every input CUDA's kernels take
    position, kwarg_only, written = _schema(func)
    device = None
    if position is not None:
        device = kwargs.get("device") if kwarg_only or position >= len(args) else args[position]
    out_cuda = device is not None and _device_type(device) == _FAKE[0].type
    if out_cuda:  # compute on the CPU
        _check_index(torch.device(device))
        if kwarg_only or position >= len(args):
            kwargs = {**kwargs, "device": CPU}
        else:
            args = (*args[:position], CPU, *args[position + 1:])
    fakes = []
    plain_args, mixed = _unwrap_all(args, fakes)
    if kwargs:
        plain_values, mixed_kwargs = _unwrap_all(kwargs.values(), fakes)
        plain_kwargs, mixed = dict(zip(kwargs, plain_values)), mixed or mixed_kwargs
    else:
        plain_kwargs = kwargs
    if not fakes and not out_cuda:
        return func(*args, **kwargs)
    _COUNT[0] += 1
    _count_sync(func, args, kwargs, fakes, device)
    if fakes and device is None:
        if mixed and func not in _CROSS_DEVICE_OK:
            _check_devices(func, args, kwargs, written)
        out_cuda = True
    if _CAPTURING[0] is not None:
        _CAPTURING[0]._will_write([plain_args[w] if isinstance(w, int) else plain_kwargs[w]
                                   for _, w in written])
    out = func(*plain_args, **plain_kwargs)
    if _CAPTURING[0] is not None:
        _CAPTURING[0]._record(func, plain_args, plain_kwargs, out)
    if not written:
        if out_cuda:
            if isinstance(out, torch.Tensor):
                return FakeCudaTensor(out)
            return tree_map(_wrap, out)
        # e.g. .to("cpu") with nothing to convert returns its input: give a copy, as a GPU does
        return tree_map(lambda x: x.clone() if any(x is t.elem for t in fakes) else x, out)
    results = list(out) if isinstance(out, (tuple, list)) else [out]
    for r, where in written:  # an in-place op returns the caller's own tensor
        own = args[where] if isinstance(where, int) else kwargs[where]
        if isinstance(own, FakeCudaTensor) and (own.elem.size() != own.size()
                                                or own.elem.stride() != own.stride()):
            raise NotImplementedError(f"the fake CUDA harness cannot run {func} on a cuda "
                                      "tensor: it changes the tensor's shape in place")
        results[r] = own
    own_results = {r for r, _ in written}
    results = [x if i in own_results or not out_cuda else _wrap(x)
               for i, x in enumerate(results)]
    if not isinstance(out, (tuple, list)):
        return results[0]
    return tuple(results) if isinstance(out, tuple) else results


_SDPA_CHOICE = aten._fused_sdp_choice.default


_COUNT = [0]


def cuda_ops() -> int:
    """How many ATen operations have run on the fake device in this process (a proxy for the
    kernels a GPU would launch: each is at least one launch there)."""
    return _COUNT[0]


# ---- host synchronizations ----------------------------------------------------------------------
#
# What makes the host wait for a GPU (the queue of launched work drains before Python goes on):
# reading a value (`.item()`, `bool(t)`, `int(t)`, `.tolist()`), anything whose output size
# depends on values (boolean-mask indexing, `nonzero`), a copy from pageable host memory to the
# device or from the device to the host, and `torch.cuda.synchronize`. A copy from pinned
# memory (`t.pin_memory()`) with `non_blocking=True` does not wait.

_SYNCS: collections.Counter = collections.Counter()
_PINNED: dict = {}  # storage address -> weak reference to the pinned tensor
_SCALAR_READS = {aten._local_scalar_dense.default, aten.is_nonzero.default, aten.item.default}
_MASK_INDEXING = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
                  aten._index_put_impl_.default}
_VALUE_SIZED = {aten.nonzero.default: "nonzero", aten.masked_select.default: "boolean mask",
                aten.unique_consecutive.default: "nonzero", aten._unique2.default: "nonzero"}


def host_syncs() -> collections.Counter:
    """How many times, by kind, the host has waited for the fake device in this process."""
    return collections.Counter(_SYNCS)


class Tally:
    """`with Tally() as t:` counts what runs on the fake device inside the block: `t.ops` (ATen
    operations, the launch proxy), `t.syncs` (host synchronizations by kind) and `t.total`."""

    def __enter__(self) -> "Tally":
        self._syncs, self._ops = host_syncs(), cuda_ops()
        return self

    def __exit__(self, *exc) -> None:
        self.syncs = host_syncs() - self._syncs
        self.ops = cuda_ops() - self._ops

    @property
    def total(self) -> int:
        return sum(self.syncs.values())


def _sync(kind: str) -> None:
    if _CAPTURING[0] is not None:
        raise RuntimeError(f"a host synchronization ({kind}) inside a CUDA graph capture: on a "
                           "GPU the capture fails ('operation not permitted when stream is "
                           "capturing') (raised by the fake CUDA harness)")
    _SYNCS[kind] += 1


_TO_OPS = {aten._to_copy.default, aten.to.dtype_layout, aten.to.device, aten.to.other}


def _argument(func, args, kwargs, name: str):
    """The value an operation got for its argument `name` (None when not given)."""
    for i, a in enumerate(func._schema.arguments):
        if a.name == name:
            return args[i] if i < len(args) and not a.kwarg_only else kwargs.get(name)
    return None


def _is_mask(index) -> bool:
    return isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8)


def _is_pinned(tensor) -> bool:
    """Whether `tensor` (or what it views) came from `pin_memory()` under the harness."""
    if not isinstance(tensor, torch.Tensor) or isinstance(tensor, FakeCudaTensor):
        return False
    owner = _PINNED.get(tensor.untyped_storage().data_ptr())
    return owner is not None and owner() is not None


def _pinned_async(source, non_blocking) -> bool:
    return bool(non_blocking) and _is_pinned(source)


def _count_sync(func, args, kwargs, fakes, device) -> None:
    """Record the host synchronization an operation with a fake tensor makes, if any."""
    if func in _SCALAR_READS:
        _sync("scalar read")
    elif func in _VALUE_SIZED:
        _sync(_VALUE_SIZED[func])
    elif func in _MASK_INDEXING and len(args) > 1 \
            and any(_is_mask(i) for i in _tensors(args[1])):
        _sync("boolean mask")
    elif func in _TO_OPS:
        source = args[0]
        if func is aten.to.other:
            device = args[1].device if len(args) > 1 else kwargs["other"].device
        if device is None:
            return
        if isinstance(source, FakeCudaTensor) and _device_type(device) == "cpu":
            _sync("device-to-host copy")
        elif not isinstance(source, FakeCudaTensor) and _device_type(device) == _FAKE[0].type \
                and not _pinned_async(source, _argument(func, args, kwargs, "non_blocking")):
            _sync("pageable host-to-device copy")
    elif func is aten.copy_.default:
        target, source = args[0], args[1]
        non_blocking = _argument(func, args, kwargs, "non_blocking")
        if isinstance(target, FakeCudaTensor) and not isinstance(source, FakeCudaTensor):
            if not _pinned_async(source, non_blocking):
                _sync("pageable host-to-device copy")
        elif not isinstance(target, FakeCudaTensor):
            _sync("device-to-host copy")


def _pin_memory(tensor, device=None):
    """`t.pin_memory()` under the harness: a copy in (what stands for) page-locked memory,
    which a `non_blocking=True` copy to the device does not wait on."""
    if isinstance(tensor, FakeCudaTensor):
        raise RuntimeError("cannot pin a tensor that is not on the CPU (raised by the fake "
                           "device harness)")
    pinned = tensor.clone()
    address = pinned.untyped_storage().data_ptr()
    _PINNED[address] = weakref.ref(pinned, lambda _: _PINNED.pop(address, None))
    return pinned


class _FakeCudaDispatch(TorchDispatchMode):
    """Every ATen operation goes through `_run`: factories on cuda, operations on fake tensors."""


def _dispatch(self, func, types, args=(), kwargs=None):
    return _run(func, args, kwargs or {})


# Set after the class is made: TorchDispatchMode wraps a subclass's own __torch_dispatch__ in
# torch._dynamo.disable, a wrapper that costs a tenth of the harness's time per operation (and
# nothing here is ever compiled).
_FakeCudaDispatch.__torch_dispatch__ = _dispatch


# ---- Python level: what the dispatch mode cannot see or serve -------------------------------

class FakeCudaGenerator(torch._C.Generator):
    """`torch.Generator(device="cuda")` under the harness: a CPU generator (random ops compute
    on the CPU) that reports the fake device, cuda:0 (mps:0 under FakeMps)."""

    @property
    def device(self) -> torch.device:
        return _FAKE[0]


class _GeneratorType(type):
    def __call__(cls, device="cpu"):
        if _device_type(device) == _FAKE[0].type:
            _check_index(torch.device(device))
            return FakeCudaGenerator()
        return torch._C.Generator(device)

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, torch._C.Generator)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, torch._C.Generator)


class _Generator(metaclass=_GeneratorType):
    """`torch.Generator` while the harness is active."""


def _check_generator(func, args, kwargs) -> None:
    """CUDA's rule: a random op's generator is on the device the op computes on. (Checked here:
    below this level a generator reaches the dispatch mode as a new Python object. PyTorch's
    random functions take `generator` by keyword only.)"""
    generator = kwargs["generator"]
    device = kwargs.get("device")
    if device is not None:
        on_cuda = _device_type(device) == _FAKE[0].type
    else:
        first = next((t for a in args for t in _tensors(a)), None)
        on_cuda = isinstance(first, FakeCudaTensor)
    fake = _FAKE[0].type
    found = fake if isinstance(generator, FakeCudaGenerator) else generator.device.type
    wanted = fake if on_cuda else "cpu"
    if found != wanted:
        raise RuntimeError(f"Expected a '{wanted}' device type for generator but found "
                           f"'{found}' (raised by the fake CUDA harness in {func.__name__})")


def _has_tensor_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, (torch.Tensor, list)) for i in items)


def _fake_in(index) -> bool:
    items = index if isinstance(index, (tuple, list)) else (index,)
    return any(isinstance(i, FakeCudaTensor) for i in items)


_CPU_INDEXED = ("indices should be either on cpu or on the same device as the indexed tensor "
                "(cpu) (raised by the fake CUDA harness)")


def _plain_index(index):
    if isinstance(index, tuple):
        return tuple(_unwrap(i) for i in index)
    return _unwrap(index)


def _getitem(tensor, index):
    """`tensor[index]` on the CPU values (PyTorch's own indexing takes a CUDA device guard)."""
    _count_mask(index)
    plain = _plain_index(index)
    out = tensor.elem[plain]
    if _CAPTURING[0] is not None:
        _CAPTURING[0]._record(torch.Tensor.__getitem__, (tensor.elem, plain), {}, out)
    return FakeCudaTensor(out)


def _setitem(tensor, index, value) -> None:
    """`tensor[index] = value` on the CPU values. A slice takes a value from either device (a
    copy); indexing with tensors (index_put_) takes a value on the tensor's device or 0-dim."""
    if not isinstance(tensor, FakeCudaTensor) and _fake_in(index):
        raise RuntimeError(_CPU_INDEXED)
    if isinstance(value, torch.Tensor) and value.dim() > 0 and _has_tensor_index(index) \
            and isinstance(value, FakeCudaTensor) != isinstance(tensor, FakeCudaTensor):
        raise _mismatch("index_put_", CPU)
    if isinstance(tensor, FakeCudaTensor):
        _count_mask(index)
        if isinstance(value, torch.Tensor) and not isinstance(value, FakeCudaTensor):
            _sync("pageable host-to-device copy")
    target = tensor.elem if isinstance(tensor, FakeCudaTensor) else tensor
    if _CAPTURING[0] is not None:
        _CAPTURING[0]._will_write([target])
    target[_plain_index(index)] = _unwrap(value)
    if _CAPTURING[0] is not None:
        _CAPTURING[0]._record(torch.Tensor.__setitem__,
                              (target, _plain_index(index), _unwrap(value)), {}, None)


def _count_mask(index) -> None:
    items = index if isinstance(index, tuple) else (index,)
    if any(_is_mask(i) for i in items):
        _sync("boolean mask")


def _numpy(tensor, *args, **kwargs):
    raise TypeError(f"can't convert {_FAKE[0]} device type tensor to numpy. Use Tensor.cpu() to "
                    "copy the tensor to host memory first.")


def _on_values(func, args, kwargs):
    """A Tensor method whose Python binding takes a CUDA device guard before it dispatches
    (`~t`, `t.contiguous()`, `t.new_tensor(...)`, ...), which a CPU-only PyTorch cannot take:
    run it on the CPU values, after `_run`'s device check."""
    _COUNT[0] += 1
    name = getattr(func, "__name__", "")
    if name == "copy_":
        _count_sync(aten.copy_.default, args, kwargs, None, None)
    elif name in ("nonzero", "argwhere", "masked_select", "unique", "unique_consecutive"):
        _sync("nonzero" if name != "masked_select" else "boolean mask")
    leaves = [t for a in (*args, *kwargs.values()) for t in _tensors(a)]
    fakes = [t for t in leaves if isinstance(t, FakeCudaTensor)]
    if func is not torch.Tensor.copy_:
        for t in leaves:
            if not isinstance(t, FakeCudaTensor) and t.dim() > 0:
                raise _mismatch(func.__name__, t.device)
    plain_args, plain_kwargs = tree_map(_unwrap, args), tree_map(_unwrap, kwargs)
    if _CAPTURING[0] is not None and name.endswith("_") and plain_args:
        _CAPTURING[0]._will_write(_tensors(plain_args[0]))  # an in-place method
    out = func(*plain_args, **plain_kwargs)
    if _CAPTURING[0] is not None:
        _CAPTURING[0]._record(func, plain_args, plain_kwargs, out)

    def rewrap(x):
        if not isinstance(x, torch.Tensor):
            return x
        own = next((t for t in fakes if t.elem is x), None)
        return own if own is not None else _wrap(x)
    return tree_map(rewrap, out)


_KERNELS = "minillm.kernels"


def _data_ptr(tensor) -> int:
    """The address of a fake tensor's CPU values, except when minillm's CPU kernels ask: a real
    GPU tensor's address points into the GPU's memory, so handing one to C is a crash."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(("torch",
                                                                                __name__)):
        frame = frame.f_back
    caller = "" if frame is None else frame.f_globals.get("__name__", "")
    if caller == _KERNELS or caller.startswith(_KERNELS + "."):
        raise RuntimeError(f"CUDA pointer passed to a CPU kernel: {caller} asked for the address "
                           f"of a {tensor.dtype} tensor of shape {tuple(tensor.shape)} on cuda:0 "
                           f"(raised by the fake CUDA harness; on a GPU this address points into "
                           f"the GPU's memory and the C code would crash)")
    return tensor.elem.data_ptr()


# Methods of a fake tensor answered here, not by dispatch.
_FAKE_METHODS = {
    torch.Tensor.tolist: lambda t: (_sync("tolist"), t.elem.tolist())[1],
    torch.Tensor.__int__: lambda t: (_sync("scalar read"), int(t.elem))[1],
    torch.Tensor.__float__: lambda t: (_sync("scalar read"), float(t.elem))[1],
    torch.Tensor.__index__: lambda t: (_sync("scalar read"), t.elem.__index__())[1],
    torch.Tensor.__complex__: lambda t: (_sync("scalar read"), complex(t.elem))[1],
    torch.Tensor.numpy: _numpy,
    torch.Tensor.__array__: _numpy,
    torch.Tensor.data_ptr: _data_ptr,
    torch.Tensor.untyped_storage: lambda t: t.elem.untyped_storage(),
    # A fake tensor never requires grad (see the limits above); asking is accepted and ignored,
    # so that nn.Parameter(t) works.
    torch.Tensor.requires_grad_: lambda t, requires_grad=True: t,
    torch.Tensor.requires_grad.__set__: lambda t, value: None,
}


def _to(tensor, *args, **kwargs):
    """Tensor.to: refuse what autograd cannot follow onto the fake device (PyTorch would abort
    the process)."""
    if torch.is_grad_enabled() and tensor.requires_grad \
            and not isinstance(tensor, FakeCudaTensor) \
            and any(isinstance(a, FakeCudaTensor) or a == _FAKE[0]
                    for a in (*args, *kwargs.values()) if isinstance(a, (torch.Tensor,
                                                                         torch.device))):
        raise RuntimeError("the fake CUDA harness cannot follow a tensor that requires grad "
                           "onto cuda; move it under torch.no_grad() (Module.to does)")
    return torch.Tensor.to(tensor, *args, **kwargs)


def _cuda(tensor, device=None, non_blocking=False, memory_format=torch.preserve_format):
    if _FAKE[0].type != "cuda":  # a Mac's PyTorch has no CUDA: let the real method say so
        return torch.Tensor.cuda(tensor, device, non_blocking=non_blocking,
                                 memory_format=memory_format)
    if device is not None:
        _check_index(torch.device("cuda", device) if isinstance(device, int)
                     else torch.device(device))
    return _to(tensor, CUDA, non_blocking=non_blocking, memory_format=memory_format)


def _getitem_any(tensor, index):
    if isinstance(tensor, FakeCudaTensor):
        return _getitem(tensor, index)
    if _fake_in(index):
        raise RuntimeError(_CPU_INDEXED)
    return tensor[index]


def _setitem_any(tensor, index, value):
    if isinstance(tensor, FakeCudaTensor) or isinstance(value, FakeCudaTensor) \
            or _fake_in(index):
        return _setitem(tensor, index, value)
    tensor[index] = value


# Calls answered here, whatever their arguments' devices.
_CALLS = {
    torch.Tensor.to: _to,
    torch.Tensor.pin_memory: _pin_memory,
    torch.Tensor.is_pinned: lambda t, device=None: _is_pinned(t),
    torch.Tensor.cuda: _cuda,
    torch.Tensor.__getitem__: _getitem_any,
    torch.Tensor.__setitem__: _setitem_any,
}

# Functions without side effects computed here on the CPU values when a fake tensor is among
# their arguments: one call instead of the several ATen operations they decompose into.
_PURE = {
    torch.nn.functional.scaled_dot_product_attention, torch.nn.functional.linear,
    torch.nn.functional.rms_norm, torch.nn.functional.embedding, torch.nn.functional.silu,
    torch.matmul, torch.Tensor.__matmul__, torch.softmax, torch.Tensor.softmax,
    torch.nn.functional.softmax,
}


def _has_fake(args, kwargs) -> bool:
    for v in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(v, FakeCudaTensor):
            return True
        if type(v) in (list, tuple) and any(isinstance(t, FakeCudaTensor) for t in v):
            return True
    return False


class _FakeCudaFunctions(TorchFunctionMode):
    """The Python-level calls: device names without an index, generators, autograd onto cuda,
    the tensor methods that read host memory or take a CUDA device guard, and a few pure
    functions computed in one piece."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs:
            if "device" in kwargs:
                device = kwargs["device"]
                if type(device) is int and _FAKE[0] == CUDA:  # a CUDA ordinal
                    _check_index(torch.device("cuda", device))
                    device = CUDA
                kwargs = {**kwargs, "device": _as_cuda0(device)}
                if kwargs["device"] == _FAKE[0] and kwargs.get("requires_grad"):
                    kwargs["requires_grad"] = False
            if kwargs.get("generator") is not None:
                _check_generator(func, args, kwargs)
        else:
            kwargs = {}
        for a in args if func is not torch.device else ():
            if type(a) is str or type(a) is torch.device:
                args = tuple(_as_cuda0(a) for a in args)
                break
        if args and isinstance(args[0], FakeCudaTensor):
            method = _FAKE_METHODS.get(func)
            if method is not None:
                return method(*args, **kwargs)
        call = _CALLS.get(func)
        if call is not None:
            return call(*args, **kwargs)
        if func in _PURE and _has_fake(args, kwargs):
            return _on_values(func, args, kwargs)
        try:
            return func(*args, **kwargs)
        except RuntimeError as error:
            if f"not linked with support for {_FAKE[0].type}" not in str(error) \
                    or not _has_fake(args, kwargs):
                raise
        return _on_values(func, args, kwargs)


# ---- torch.cuda ----------------------------------------------------------------------------

class FakeCudaEvent:
    """`torch.cuda.Event` under the harness: it records the host clock (the fake device has
    finished its work when a call returns)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False):
        self.enable_timing = enable_timing
        self.time = None

    def record(self, stream=None) -> None:
        self.time = time.perf_counter()

    def synchronize(self) -> None:
        _sync("synchronize")

    def wait(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: "FakeCudaEvent") -> float:
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self.time is None or end.time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end.time - self.time) * 1000.0


def _event_factory(real_event):
    """`torch.Event(device=...)` (transformers' generate makes two): a host-clock event on the
    fake device, the real one elsewhere. A CPU build of torch refuses an mps event outright."""
    def event(device=None, **options):
        if device is not None and torch.device(device).type == _FAKE[0].type:
            return FakeCudaEvent(**options)
        return real_event(device=device, **options)  # device=None is torch's own default
    return event


def _cuda_device_arg(device=None) -> None:
    if device is None:
        return
    device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {device}")
    _check_index(device)


def _cuda_synchronize(device=None) -> None:
    _cuda_device_arg(device)
    _sync("synchronize")


def _fake_cuda_api() -> dict:
    """torch.cuda's functions as a machine with one GPU answers them."""
    properties = types.SimpleNamespace(name=DEVICE_NAME, major=9, minor=0,
                                       total_memory=80 * 2**30, multi_processor_count=132)

    def about(answer):
        def ask(device=None):
            _cuda_device_arg(device)
            return answer
        return ask
    return {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "_lazy_init": lambda: None,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": lambda device: _cuda_device_arg(device),
        "synchronize": _cuda_synchronize,
        "get_device_name": about(DEVICE_NAME),
        "get_device_capability": about((9, 0)),
        "get_device_properties": about(properties),
        "is_bf16_supported": lambda including_emulation=True: True,
        "manual_seed": lambda seed: None,
        "manual_seed_all": lambda seed: None,
        "seed": lambda: None,
        "seed_all": lambda: None,
        "empty_cache": lambda: None,
        "Event": FakeCudaEvent,
        "CUDAGraph": FakeCudaGraph,
        "graph": _FakeGraphCapture,
        "Stream": FakeCudaStream,
        "stream": _FakeStreamContext,
        "current_stream": _current_stream,
    }


# ---- CUDA graphs and streams -----------------------------------------------------------------

_CAPTURING = [None]  # the FakeCudaGraph being captured, if any


def _storages(values) -> set:
    return {t.untyped_storage().data_ptr() for v in values for t in _tensors(v)}


class FakeCudaGraph:
    """`torch.cuda.CUDAGraph` under the harness. Inside `with torch.cuda.graph(g):` every
    operation on the fake device runs (so that shapes and later operations work) and is recorded
    with the very tensors it read and wrote; `replay()` runs the recorded operations again on
    those tensors, writing each fresh result into the tensor the capture made. So, as on a GPU,
    a replay computes from what the recorded tensors hold and never from Python values the code
    had while it was captured; a host sync inside the capture raises; after the capture the
    tensors it wrote hold what they held before, and its own fresh outputs hold no values until
    the first replay (NaN here, for floating tensors). A replay counts as one launch
    (`cuda_ops()`)."""

    def __init__(self, keep_graph: bool = False):
        self._ops: list = []
        self._made: set = set()  # storages the capture's operations made
        self._saved: dict = {}  # storage address -> (storage, its bytes before the capture)
        self.replays = 0

    def _will_write(self, tensors) -> None:
        """Keep what an operation about to run in the capture overwrites, if it was there before
        the capture: a capture computes nothing on a GPU, so its end puts it back."""
        for t in tensors:
            storage = t.untyped_storage()
            address = storage.data_ptr()
            if address not in self._made and address not in self._saved:
                self._saved[address] = (storage, storage.clone())

    def _record(self, func, args, kwargs, out) -> None:
        inputs = _storages((*args, *kwargs.values()))
        outs = [t for t in _tensors(out) if isinstance(t, torch.Tensor)] if out is not None \
            else []
        fresh = [i for i, t in enumerate(outs) if t.untyped_storage().data_ptr() not in inputs]
        self._made.update(outs[i].untyped_storage().data_ptr() for i in fresh)
        self._ops.append((func, args, kwargs, outs, fresh))

    def _undo(self) -> None:
        """What a GPU holds after a capture: the tensors from before untouched, the capture's
        own outputs empty (NaN where floating)."""
        for storage, before in self._saved.values():
            storage.copy_(before)
        self._saved = {}
        for _, _, _, outs, fresh in self._ops:
            for i in fresh:
                if outs[i].is_floating_point():
                    outs[i].fill_(float("nan"))

    def replay(self) -> None:
        if _CAPTURING[0] is self:
            raise RuntimeError("replay() of a CUDA graph while it is being captured")
        _COUNT[0] += 1
        self.replays += 1
        # The recorded operations read and write plain CPU tensors, which the harness's modes
        # would pass through unchanged, at a cost per operation: run them without the modes.
        with torch._C.DisableTorchFunction(), _disable_current_modes():
            for func, args, kwargs, outs, fresh in self._ops:
                again = func(*args, **kwargs)
                if fresh:
                    new = [t for t in _tensors(again) if isinstance(t, torch.Tensor)]
                    for i in fresh:
                        outs[i].copy_(new[i])

    def reset(self) -> None:
        self._ops, self._made, self._saved = [], set(), {}

    def capture_begin(self, *args, **kwargs) -> None:
        if _CAPTURING[0] is not None:
            raise RuntimeError("a CUDA graph is already being captured")
        self.reset()
        _CAPTURING[0] = self

    def capture_end(self) -> None:
        _CAPTURING[0] = None
        self._undo()


class _FakeGraphCapture:
    """`torch.cuda.graph(g)` under the harness: the block is captured into `g`."""

    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        self.cuda_graph = cuda_graph

    def __enter__(self):
        self.cuda_graph.capture_begin()

    def __exit__(self, kind, error, trace) -> None:
        if _CAPTURING[0] is self.cuda_graph:
            if kind is None:
                self.cuda_graph.capture_end()
            else:
                _CAPTURING[0] = None
                self.cuda_graph._undo()


class FakeCudaStream:
    """`torch.cuda.Stream` under the harness: one queue (the fake device finishes each operation
    when its call returns), so waiting is free and synchronizing counts as a sync."""

    def __init__(self, device=None, priority: int = 0, **kwargs):
        _cuda_device_arg(device)
        self.device = CUDA

    def wait_stream(self, stream) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def synchronize(self) -> None:
        _sync("synchronize")

    def query(self) -> bool:
        return True


_DEFAULT_STREAM = [None]


def _current_stream(device=None) -> FakeCudaStream:
    if _DEFAULT_STREAM[0] is None:
        _DEFAULT_STREAM[0] = FakeCudaStream()
    _cuda_device_arg(device)
    return _DEFAULT_STREAM[0]


class _FakeStreamContext:
    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc) -> None:
        pass


# ---- torch.mps and torch.backends.mps ---------------------------------------------------------

# What Apple's GPUs cannot hold, and what PyTorch's MPS backend says when asked to.
_NOT_ON_MPS = (torch.float64, torch.complex128)
_MPS_FLOAT64 = ("Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't "
                "support float64. Please use float32 instead. (raised by the fake MPS harness)")
_MPS_SYNCS = [0]


def mps_synchronizations() -> int:
    """How many times `torch.mps.synchronize` has been called under FakeMps in this process."""
    return _MPS_SYNCS[0]


def _mps_synchronize() -> None:
    _MPS_SYNCS[0] += 1
    _sync("synchronize")


def _fake_mps_api() -> dict:
    """torch.mps's functions as an Apple Silicon Mac answers them (memory figures: none used)."""
    return {
        "synchronize": _mps_synchronize,
        "device_count": lambda: 1,
        "manual_seed": lambda seed: None,
        "seed": lambda: None,
        "empty_cache": lambda: None,
        "current_allocated_memory": lambda: 0,
        "driver_allocated_memory": lambda: 0,
        "recommended_max_memory": lambda: 16 * 2**30,
        "Event": FakeCudaEvent,
    }


# ---- the switch ----------------------------------------------------------------------------

_MISSING = object()


class FakeCuda:
    """The fake CUDA device: `with FakeCuda():`, or `FakeCuda().start()` for the rest of the
    thread's life (a notebook kernel). One at a time (FakeMps included)."""

    _active = None
    device = CUDA

    def _patches(self) -> list:
        """(owner, name, value): what the harness sets while active, besides the modes."""
        return [(torch.cuda, name, value) for name, value in _fake_cuda_api().items()]

    def __init__(self):
        self._modes = None
        self._saved = []

    def start(self) -> "FakeCuda":
        if FakeCuda._active is not None:
            raise RuntimeError(f"a {type(FakeCuda._active).__name__} is already active")
        # torch._dynamo (imported on the first dispatch) indexes torch.cuda's functions when it
        # is first imported: let it see the real ones.
        import torch._dynamo  # noqa: F401

        FakeCuda._active = self
        _FAKE[0] = self.device
        self._lift = torch._C._only_lift_cpu_tensors()
        # Module.to("cpu") would otherwise set `param.data` to a CPU tensor, leaving the fake
        # wrapper in place with stale values.
        self._swap = torch.__future__.get_swap_module_params_on_conversion()
        torch.__future__.set_swap_module_params_on_conversion(True)
        torch._C._set_only_lift_cpu_tensors(True)  # torch.tensor(..., device=) builds on the CPU
        patches = self._patches()
        patches += [(torch, "Generator", _Generator), (torch, "Event", _event_factory(torch.Event)),
                    (threading.Thread, "run", _under_harness(threading.Thread.run))]
        for owner, name, value in patches:
            self._saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
            setattr(owner, name, value)
        self._modes = _enter_modes()
        return self

    def stop(self) -> None:
        if FakeCuda._active is not self:
            return
        _exit_modes(self._modes)
        for owner, name, value in reversed(self._saved):
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)
        self._saved, self._modes = [], None
        torch._C._set_only_lift_cpu_tensors(self._lift)
        torch.__future__.set_swap_module_params_on_conversion(self._swap)
        FakeCuda._active = None

    def __enter__(self) -> "FakeCuda":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class FakeMps(FakeCuda):
    """The fake device as an Apple GPU shows itself: `with FakeMps():` (see the module's
    docstring). torch.cuda is left as it is: unavailable."""

    device = MPS

    def _patches(self) -> list:
        mps = torch.backends.mps
        return [(torch.mps, name, value) for name, value in _fake_mps_api().items()] + [
            (mps, "is_available", lambda: True), (mps, "is_built", lambda: True),
            (mps, "is_macos_or_newer", lambda major, minor: True),
            (mps, "is_macos13_or_newer", lambda minor=0: True),
            (mps, "get_name", lambda: MPS_DEVICE_NAME)]


def _enter_modes() -> list:
    modes = [_FakeCudaFunctions(), _FakeCudaDispatch()]
    for mode in modes:
        mode.__enter__()
    return modes


def _exit_modes(modes) -> None:
    for mode in reversed(modes):
        mode.__exit__(None, None, None)


def _under_harness(run):
    """Thread.run for threads started while the harness is active: the modes are per thread."""
    def run_under_harness(thread):
        if FakeCuda._active is None:
            return run(thread)
        modes = _enter_modes()
        try:
            return run(thread)
        finally:
            _exit_modes(modes)
    return run_under_harness
