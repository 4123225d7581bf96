// Native core of the emu backend: an accelerator emulated on host memory.
//
// One translation unit, no pybind: everything Python needs is exposed as
// custom operators in the `emu` namespace, and the module init function at
// the bottom only exists so that `import torch_emu._C` loads this library
// (which runs the static registrations below).
//
// What lives here is what cannot be written in Python: the allocator, the
// device guard, the hooks, the generators, the structural kernels (factories,
// views, resize_, set_, copies, item) and the boxed CPU fallback.  Every
// numeric kernel is a Python lowering (torch_emu/lowering/).

#include <Python.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/record_function.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/zeros.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include "emu_profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace emu {
namespace {

constexpr auto kEmu = c10::DeviceType::PrivateUse1;
constexpr c10::DeviceIndex kMaxDevices = 16;

// ---------------------------------------------------------------- devices --

// Read once; the Python package validates EMU_DEVICE_COUNT before loading us,
// so a bad value here can only come from bypassing it: clamp rather than abort.
c10::DeviceIndex device_count() {
  static const c10::DeviceIndex count = [] {
    const char* env = std::getenv("EMU_DEVICE_COUNT");
    long n = env ? std::strtol(env, nullptr, 10) : 2;
    if (n < 1) n = 1;
    if (n > kMaxDevices) n = kMaxDevices;
    return static_cast<c10::DeviceIndex>(n);
  }();
  return count;
}

thread_local c10::DeviceIndex tls_current_device = 0;

void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(
      index >= 0 && index < device_count(),
      "emu: device index ", static_cast<int>(index), " is out of range; this process has ",
      static_cast<int>(device_count()), " emu devices (set EMU_DEVICE_COUNT to change it)");
}

c10::DeviceIndex resolve_index(c10::DeviceIndex index) {
  if (index < 0) return tls_current_device;
  check_index(index);
  return index;
}

// -------------------------------------------------------------- allocator --

// Every block carries a header in front of the data so the deleter knows the
// size and device without a lookup table.  64 bytes keeps the data aligned
// for any vector width the CPU kernels use.
constexpr size_t kHeader = 64;
struct BlockHeader {
  size_t nbytes;
  c10::DeviceIndex device;
};

struct DeviceCounters {
  c10::CachingDeviceAllocator::DeviceStats stats;
};

std::mutex stats_mutex;
DeviceCounters counters[kMaxDevices];

void record_alloc(c10::DeviceIndex d, size_t n) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  auto& s = counters[d].stats;
  constexpr auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  s.allocation[agg].increase(1);
  s.segment[agg].increase(1);
  s.active[agg].increase(1);
  s.allocated_bytes[agg].increase(n);
  s.reserved_bytes[agg].increase(n);
  s.active_bytes[agg].increase(n);
  s.requested_bytes[agg].increase(n);
  s.num_device_alloc += 1;
}

void record_free(c10::DeviceIndex d, size_t n) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  auto& s = counters[d].stats;
  constexpr auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  s.allocation[agg].decrease(1);
  s.segment[agg].decrease(1);
  s.active[agg].decrease(1);
  s.allocated_bytes[agg].decrease(n);
  s.reserved_bytes[agg].decrease(n);
  s.active_bytes[agg].decrease(n);
  s.requested_bytes[agg].decrease(n);
  s.num_device_free += 1;
}

// torch.profiler(profile_memory=True) sees every allocation and free on its device,
// with the device's totals after it.
void report_to_profiler(void* data, int64_t delta, c10::DeviceIndex d) {
  if (!c10::memoryProfilingEnabled()) return;
  int64_t allocated = 0;
  {
    std::lock_guard<std::mutex> lock(stats_mutex);
    constexpr auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    allocated = counters[d].stats.allocated_bytes[agg].current;
  }
  c10::reportMemoryUsageToProfiler(data, delta, static_cast<size_t>(allocated),
                                   static_cast<size_t>(allocated), c10::Device(kEmu, d));
}

void emu_delete(void* data) {
  auto* base = static_cast<char*>(data) - kHeader;
  auto* header = reinterpret_cast<BlockHeader*>(base);
  record_free(header->device, header->nbytes);
  report_to_profiler(data, -static_cast<int64_t>(header->nbytes), header->device);
  std::free(base);
}

struct EmuAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    const auto device = tls_current_device;
    void* base = nullptr;
    if (posix_memalign(&base, kHeader, kHeader + nbytes) != 0 || base == nullptr) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, "emu: out of host memory allocating ",
                       nbytes, " bytes on emu:", static_cast<int>(device));
    }
    auto* header = static_cast<BlockHeader*>(base);
    header->nbytes = nbytes;
    header->device = device;
    record_alloc(device, nbytes);
    void* data = static_cast<char*>(base) + kHeader;
    report_to_profiler(data, static_cast<int64_t>(nbytes), device);
    return {data, data, &emu_delete, c10::Device(kEmu, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &emu_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}  // nothing is cached
  void recordStream(const c10::DataPtr&, c10::Stream) override {}  // execution is synchronous
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    device = resolve_index(device);
    std::lock_guard<std::mutex> lock(stats_mutex);
    return counters[device].stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    device = resolve_index(device);
    std::lock_guard<std::mutex> lock(stats_mutex);
    auto& s = counters[device].stats;
    for (auto* arr : {&s.allocation, &s.segment, &s.active, &s.allocated_bytes,
                      &s.reserved_bytes, &s.active_bytes, &s.requested_bytes}) {
      for (auto& stat : *arr) stat.reset_accumulated();
    }
    s.num_device_alloc = 0;
    s.num_device_free = 0;
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    device = resolve_index(device);
    std::lock_guard<std::mutex> lock(stats_mutex);
    auto& s = counters[device].stats;
    for (auto* arr : {&s.allocation, &s.segment, &s.active, &s.allocated_bytes,
                      &s.reserved_bytes, &s.active_bytes, &s.requested_bytes}) {
      for (auto& stat : *arr) stat.reset_peak();
    }
  }
};

EmuAllocator allocator;
REGISTER_ALLOCATOR(kEmu, &allocator);

// ------------------------------------------------------------------ guard --

// Execution is synchronous, so streams are bookkeeping only: each device has
// a current stream id per thread, new streams get fresh ids, and every event
// is complete as soon as it is recorded.
thread_local c10::StreamId tls_current_stream[kMaxDevices] = {};
std::atomic<c10::StreamId> next_stream_id{1};

struct EmuEvent {
  std::chrono::steady_clock::time_point when;
};

struct EmuGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kEmu; }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return {kEmu, tls_current_device}; }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kEmu, "emu: expected an emu device, got ", d);
    tls_current_device = resolve_index(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < device_count()) tls_current_device = d.index();
  }
  c10::Stream getStream(c10::Device d) const override {
    auto index = resolve_index(d.index());
    return c10::Stream(c10::Stream::UNSAFE, {kEmu, index}, tls_current_stream[index]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, {kEmu, resolve_index(d.index())});
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override {
    return getNewStream(d, 0);
  }
  c10::Stream getNewStream(c10::Device d, int) const override {
    return c10::Stream(c10::Stream::UNSAFE, {kEmu, resolve_index(d.index())}, next_stream_id++);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    auto index = resolve_index(s.device_index());
    auto old = getStream(s.device());
    tls_current_stream[index] = s.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }
  void record(void** event, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {
    if (*event == nullptr) *event = new EmuEvent();
    static_cast<EmuEvent*>(*event)->when = std::chrono::steady_clock::now();
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<EmuEvent*>(event);
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "emu: both events must be recorded before elapsed_time");
    auto delta = static_cast<EmuEvent*>(end)->when - static_cast<EmuEvent*>(start)->when;
    return std::chrono::duration<double, std::milli>(delta).count();
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, EmuGuardImpl);

// -------------------------------------------------------------- generator --

// The CPU mt19937 generator re-tagged to an emu device: draws are
// reproducible under manual_seed and its state has the CPU layout.
struct EmuGenerator final : at::CPUGeneratorImpl {
  explicit EmuGenerator(c10::DeviceIndex index, uint64_t seed = c10::default_rng_seed_val)
      : at::CPUGeneratorImpl(seed) {
    device_ = c10::Device(kEmu, index);
    key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  }

 private:
  EmuGenerator* clone_impl() const override {
    auto* copy = new EmuGenerator(device_.index());
    copy->set_state(*get_state());
    return copy;
  }
};

at::Generator make_generator(c10::DeviceIndex index) {
  return at::make_generator<EmuGenerator>(index);
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  static std::once_flag once;
  static std::vector<at::Generator> generators;
  std::call_once(once, [] {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) generators.push_back(make_generator(i));
  });
  return generators[resolve_index(index)];
}

// ------------------------------------------------------------ pinned host --

// Page-locked host memory stands in for what a real device would DMA from: emu
// keeps a table of its blocks, so that is_pinned() is true for them (and for views
// into them) and false for any other host memory, as on CUDA.
std::mutex pinned_mutex;
std::map<uintptr_t, size_t> pinned_blocks;  // start -> size

void pinned_delete(void* data) {
  {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    pinned_blocks.erase(reinterpret_cast<uintptr_t>(data));
  }
  std::free(data);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nullptr;
    if (nbytes > 0 && (posix_memalign(&data, 64, nbytes) != 0 || data == nullptr)) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, "emu: out of pinned host memory allocating ",
                       nbytes, " bytes");
    }
    if (data == nullptr) return {nullptr, nullptr, &pinned_delete, c10::Device(c10::kCPU)};
    {
      std::lock_guard<std::mutex> lock(pinned_mutex);
      pinned_blocks[reinterpret_cast<uintptr_t>(data)] = nbytes;
    }
    return {data, data, &pinned_delete, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &pinned_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

PinnedAllocator pinned_allocator;

bool is_pinned(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(pinned_mutex);
  auto after = pinned_blocks.upper_bound(address);
  if (after == pinned_blocks.begin()) return false;
  const auto& [start, size] = *std::prev(after);
  return address < start + std::max<size_t>(size, 1);
}

// ------------------------------------------------------------------ hooks --

struct EmuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex d) const override { tls_current_device = resolve_index(d); }
  c10::DeviceIndex getCurrentDevice() const override { return tls_current_device; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    auto old = tls_current_device;
    tls_current_device = resolve_index(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return make_generator(resolve_index(index));
  }
  // Views can point anywhere inside a block, so the pointer alone does not
  // name its device; the current device is the documented best effort.
  at::Device getDeviceFromPtr(void*) const override { return {kEmu, tls_current_device}; }
  bool isPinnedPtr(const void* ptr) const override { return is_pinned(ptr); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &pinned_allocator; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "emu: trying to resize storage that is not resizable");
    c10::DeviceGuard guard(impl->device());
    auto fresh = allocator.allocate(newsize);
    const auto keep = std::min(newsize, impl->nbytes());
    if (keep > 0) std::memcpy(fresh.get(), impl->data(), keep);
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

const bool hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new EmuHooks());
  return true;
}();

// ------------------------------------------------------------ CPU aliases --

// A CPU tensor over the same memory, with the conjugate and negative bits
// (otherwise conj views compute on the unconjugated values).
//
// An alias the kernel writes (in-place self, out=) takes a writable pointer,
// which gives a lazy copy-on-write tensor its own copy first.  An alias it
// only reads takes the read-only pointer, so a copy-on-write input stays lazy
// as on the CPU; nothing writes through that alias.
//
// Aliases made for one kernel call share a CPU storage wherever their tensors
// share an emu storage (``AliasStorages``): the CPU kernels' overlap checks
// (copy_, index_add_, cat's out=, ...) compare storages, so tensors that
// overlap on emu must overlap on the CPU too, or those checks never fire.
//
// A zero tensor has no memory to alias: kernels the ZeroTensor key lets through
// (dot, vdot, mul.Scalar, ...) read it as CPU zeros, and none may write it.
struct AliasStorage {
  const c10::StorageImpl* source;
  c10::Storage storage;
  bool writable;
};
using AliasStorages = std::vector<AliasStorage>;

c10::Storage cpu_storage(const at::Tensor& t, bool written, AliasStorages* shared) {
  const c10::StorageImpl* source = t.storage().unsafeGetStorageImpl();
  AliasStorage* entry = nullptr;
  if (shared != nullptr) {
    for (auto& known : *shared) {
      if (known.source == source) entry = &known;
    }
    if (entry != nullptr && (entry->writable || !written)) return entry->storage;
  }
  const c10::Storage& emu = t.storage();
  void* base = written ? emu.mutable_data() : const_cast<void*>(emu.data());
  if (entry != nullptr) {
    // Read so far, written now: the same memory unless the storage was a lazy
    // copy-on-write one, which writing just materialized.  The earlier read-only
    // aliases keep the shared data (the same values); the written one must not.
    if (entry->storage.data() == base) {
      entry->writable = true;
      return entry->storage;
    }
  }
  // Resizable through the CPU allocator: when a CPU kernel must grow an out=
  // alias it moves it to fresh CPU memory instead of failing, and the lowering
  // then resizes the emu tensor and copies the result back.
  c10::Storage storage(c10::Storage::use_byte_size_t(), emu.nbytes(),
                       at::DataPtr(base, base, [](void*) {}, c10::Device(c10::kCPU)),
                       c10::GetCPUAllocator(), /*resizable=*/true);
  if (shared != nullptr) {
    if (entry != nullptr) {
      *entry = {source, storage, written};
    } else {
      shared->push_back({source, storage, written});
    }
  }
  return storage;
}

at::Tensor cpu_alias(const at::Tensor& t, bool written = true, AliasStorages* shared = nullptr) {
  if (!t.defined() || t.device().type() != kEmu) return t;
  if (t._is_zerotensor()) {
    TORCH_CHECK(!written, "emu: zero tensors are immutable; clone one before writing to it");
    return at::zeros(t.sizes(), t.options().device(c10::kCPU).requires_grad(false));
  }
  auto alias = at::detail::make_tensor<c10::TensorImpl>(
      cpu_storage(t, written, shared), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  alias.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(),
                                                      t.storage_offset());
  if (t.is_conj()) alias._set_conj(true);
  if (t.is_neg()) alias._set_neg(true);
  return alias;
}

// ``written[i]`` says whether tensor i is written; an empty list: all are.
std::vector<at::Tensor> cpu_aliases(at::TensorList ts, const c10::List<bool>& written) {
  TORCH_CHECK(written.empty() || written.size() == ts.size(), "emu: cpu_aliases got ",
              ts.size(), " tensors and ", written.size(), " written flags");
  AliasStorages shared;
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    out.push_back(cpu_alias(ts[i], written.empty() || written.get(i), &shared));
  }
  return out;
}

// Copies a CPU result onto an emu device, keeping its layout when it is dense.
at::Tensor to_device(const at::Tensor& src, int64_t index) {
  c10::DeviceGuard guard(c10::Device(kEmu, resolve_index(static_cast<c10::DeviceIndex>(index))));
  const auto keys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  at::Tensor dst;
  if (src.is_non_overlapping_and_dense()) {
    // Same sizes and strides, both dense: the bytes form one block starting at
    // data_ptr, so a single memcpy moves them.
    dst = at::detail::empty_strided_generic(src.sizes(), src.strides(), &allocator, keys,
                                            src.scalar_type());
    if (src.numel() > 0) {
      std::memcpy(dst.data_ptr(), src.data_ptr(), src.numel() * src.element_size());
    }
    // Raw bytes were copied, so the lazy conjugate/negative bits travel too.
    if (src.is_conj()) dst._set_conj(true);
    if (src.is_neg()) dst._set_neg(true);
  } else {
    dst = at::detail::empty_generic(src.sizes(), &allocator, keys, src.scalar_type(),
                                    c10::MemoryFormat::Contiguous);
    cpu_alias(dst).copy_(src);  // copy_ resolves the conj/neg bits
  }
  return dst;
}

// --------------------------------------------------------- native kernels --

// The names and lines of the kernels registered below, so that the Python
// registry can list them next to the Python lowerings.
std::vector<std::pair<std::string, int64_t>>& native_table() {
  static std::vector<std::pair<std::string, int64_t>> table;
  return table;
}

#define EMU_IMPL(m, name, fn)                          \
  do {                                                 \
    native_table().emplace_back("aten::" name, __LINE__); \
    (m).impl(name, fn);                                \
  } while (0)

c10::DeviceIndex target_index(std::optional<c10::Device> device) {
  if (device && device->has_index()) return resolve_index(device->index());
  return tls_current_device;
}

// With deterministic algorithms on, torch fills new memory (NaN, or an integer
// type's largest value) so that reading it uninitialized gives the same result
// every time; the CPU and CUDA factories do it, and tests check it.
at::Tensor filled_if_deterministic(at::Tensor t) {
  const auto& context = at::globalContext();
  if (context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory()) {
    at::Tensor alias = cpu_alias(t);
    at::native::fill_empty_deterministic_(alias);
  }
  return t;
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device, std::optional<bool>,
                               std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(!layout || *layout == c10::kStrided,
              "emu: unsupported feature 'sparse': sparse layouts are not implemented on emu");
  c10::DeviceGuard guard(c10::Device(kEmu, target_index(device)));
  return filled_if_deterministic(at::detail::empty_generic(
      size, &allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::dtype_or_default(dtype), memory_format));
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool>) {
  TORCH_CHECK(!layout || *layout == c10::kStrided,
              "emu: unsupported feature 'sparse': sparse layouts are not implemented on emu");
  c10::DeviceGuard guard(c10::Device(kEmu, target_index(device)));
  return filled_if_deterministic(at::detail::empty_strided_generic(
      size, stride, &allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::dtype_or_default(dtype)));
}

// Zero tensors stand for derivatives known to be zero (forward- and backward-mode
// AD make them).  As on the CPU they own no memory: the ZeroTensor dispatch key,
// above the backend, gives them to the ops with a zero-tensor kernel and
// materializes them as zeros for every other op.
struct ZeroAllocator final : c10::Allocator {
  static void nothing(void*) {}
  c10::DataPtr allocate(size_t) override {
    return {nullptr, nullptr, &nothing, c10::Device(kEmu, tls_current_device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &nothing; }
  void copy_data(void*, const void*, std::size_t) const override {}
};

ZeroAllocator zero_allocator;

at::Tensor efficient_zero_tensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                                 std::optional<c10::Layout> layout,
                                 std::optional<c10::Device> device, std::optional<bool>) {
  TORCH_CHECK(!layout || *layout == c10::kStrided,
              "emu: unsupported feature 'sparse': sparse layouts are not implemented on emu");
  c10::DeviceGuard guard(c10::Device(kEmu, target_index(device)));
  const auto keys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1) |
                    c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
  return at::detail::empty_generic(size, &zero_allocator, keys, c10::dtype_or_default(dtype),
                                   std::nullopt);
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  // The CPU implementation only touches metadata and the storage's own
  // allocator, which is ours; growing keeps the same StorageImpl, so other
  // views of the tensor keep aliasing it.
  c10::DeviceGuard guard(self.device());
  return at::native::resize_(self, size, memory_format);
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == kEmu, "emu: set_ expects an emu storage, got one on ",
              source.device());
  return at::native::set_storage_cpu_(self, std::move(source), storage_offset, size, stride);
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  const auto itemsize = self.dtype().itemsize();
  const int64_t n = static_cast<int64_t>(source.nbytes() / itemsize);
  return set_storage(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &allocator, /*resizable=*/true);
  return set_storage(self, std::move(storage), 0, {0}, {});
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
  // One side may be on the CPU; the CPU copy kernel handles dtype casts,
  // broadcasting and strides on the aliases.
  if (self.numel() == 0 && dst.numel() == 0) return dst;
  const bool from_emu = self.device().type() == kEmu;
  const bool to_emu = dst.device().type() == kEmu;
  profiler::KernelTimer timer(
      profiler::EventKind::memcpy,
      from_emu ? (to_emu ? "Memcpy DtoD (emu)" : "Memcpy DtoH (emu)") : "Memcpy HtoD (emu)",
      (to_emu ? dst : self).device().index());
  AliasStorages shared;
  at::Tensor target = cpu_alias(dst, /*written=*/true, &shared);
  at::DisableRecordFunctionGuard device_internals;
  target.copy_(cpu_alias(self, /*written=*/false, &shared));
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::_local_scalar_dense(cpu_alias(self, /*written=*/false));
}

at::Tensor nested_view_from_buffer(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const at::Tensor&) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "emu: unsupported feature 'nested': NestedTensor is not implemented on emu");
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  EMU_IMPL(m, "empty.memory_format", TORCH_FN(empty_memory_format));
  EMU_IMPL(m, "empty_strided", TORCH_FN(empty_strided));
  EMU_IMPL(m, "_efficientzerotensor", TORCH_FN(efficient_zero_tensor));
  EMU_IMPL(m, "as_strided", TORCH_FN(as_strided));
  EMU_IMPL(m, "view", TORCH_FN(at::native::view));
  EMU_IMPL(m, "_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  EMU_IMPL(m, "view_as_real", TORCH_FN(at::native::view_as_real));
  EMU_IMPL(m, "view_as_complex", TORCH_FN(at::native::view_as_complex));
  EMU_IMPL(m, "unfold", TORCH_FN(at::native::unfold));
  EMU_IMPL(m, "_nested_view_from_buffer", TORCH_FN(nested_view_from_buffer));
  EMU_IMPL(m, "resize_", TORCH_FN(resize_));
  EMU_IMPL(m, "set_", TORCH_FN(set_empty));
  EMU_IMPL(m, "set_.source_Storage", TORCH_FN(set_source_storage));
  EMU_IMPL(m, "set_.source_Storage_storage_offset", TORCH_FN(set_storage));
  EMU_IMPL(m, "set_.source_Tensor", TORCH_FN(set_source_tensor));
  EMU_IMPL(m, "_copy_from", TORCH_FN(copy_from));
  EMU_IMPL(m, "_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  EMU_IMPL(m, "_local_scalar_dense", TORCH_FN(local_scalar_dense));
}

// The conjugate and negative fallbacks would materialize `self` with clone(),
// and clone() copies through _copy_from again: infinite recursion.  Our copy
// kernels see the bits through the CPU aliases, so let the call fall through.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

// --------------------------------------------------------- derived kernels --

// The kernel behind most Python lowering declarations (`lower(...)` in
// torch_emu/lowering/): run the op's CPU kernel on zero-copy CPU aliases of the
// emu arguments.  Written arguments (in-place self, out=) receive the result
// through their aliases; fresh results are copied to the device of the first
// emu argument; a Generator argument (or the device's default generator) is
// replaced by a CPU generator carrying its state, which is written back after.
// It is the C++ twin of torch_emu/lowering/kernels.py, which remains for
// lowerings that need Python hooks; this one exists because it costs a few
// microseconds per call instead of tens.
// native_batch_norm updates running_mean and running_var in place although its
// schema does not mark them written: their aliases must be writable too, or a
// lazy copy-on-write input would be updated in the memory it shares.
bool writes_unannotated(const c10::Argument& arg) {
  return arg.name() == "running_mean" || arg.name() == "running_var";
}

class DerivedKernel final : public c10::OperatorKernel {
 public:
  explicit DerivedKernel(const c10::FunctionSchema& schema)
      : kernel_name_("emu_kernel:" + schema.operator_name().name.substr(6) +
                     (schema.overload_name().empty() ? "" : "." + schema.overload_name())) {
    const auto& args = schema.arguments();
    for (size_t i = 0; i < args.size(); ++i) {
      const auto& info = args[i].alias_info();
      if (info && info->isWrite()) written_.push_back(static_cast<int>(i));
      is_written_.push_back((info && info->isWrite()) || writes_unannotated(args[i]));
      if (args[i].type()->str().find("Generator") != std::string::npos) {
        generator_ = static_cast<int>(i);
      }
    }
    for (const auto& ret : schema.returns()) {
      int source = -1;
      if (ret.alias_info()) {
        for (int i : written_) {
          if (args[i].alias_info()->beforeSets() == ret.alias_info()->beforeSets()) source = i;
        }
      }
      returns_.push_back(source);
    }
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const auto num_args = op.schema().arguments().size();
    auto args = torch::jit::pop(*stack, num_args);
    std::vector<c10::IValue> originals = args;  // shallow: IValues share the tensors
    c10::DeviceIndex device = -1;
    // Like CUDA, an op takes tensors from one device only; CPU tensors are
    // accepted as 0-dim scalar inputs and, inside index lists, as indices, but
    // never as what the op writes (an out= on the CPU for emu inputs).
    bool host_tensor = false;
    // Index lists (Tensor?[]) may hold CPU tensors or tensors of self's device; other
    // devices get the index kernels' own error, which names self's device, as on CUDA.
    std::optional<c10::Device> self_device;
    if (!args.empty() && args[0].isTensor() && args[0].toTensor().defined()) {
      self_device = args[0].toTensor().device();
    }
    AliasStorages shared;
    // A tensor passed twice (cat's out= among its inputs, x.add_(x)) gets one alias, so
    // that the CPU kernel's identity checks see what the caller passed; it is writable
    // when any of its uses is written.
    std::vector<std::pair<const c10::TensorImpl*, at::Tensor>> same;
    std::vector<const c10::TensorImpl*> written_impls;
    for (size_t i = 0; i < args.size(); ++i) {
      if (!is_written_[i]) continue;
      if (args[i].isTensor()) written_impls.push_back(args[i].toTensor().unsafeGetTensorImpl());
      if (args[i].isTensorList()) {
        for (const at::Tensor& t : args[i].toTensorList()) {
          written_impls.push_back(t.unsafeGetTensorImpl());
        }
      }
    }
    auto alias_of = [&](const at::Tensor& t, bool host_ok, bool written) -> at::Tensor {
      if (!t.defined()) return t;
      if (t.device().type() != kEmu) {
        if ((t.dim() > 0 || written) && !host_ok) host_tensor = true;
        return t;
      }
      TORCH_CHECK(!host_ok || !self_device || *self_device == t.device(),
                  "indices should be either on cpu or on the same device as the indexed "
                  "tensor (", *self_device, ")");
      if (device < 0) {
        device = t.device().index();
      } else {
        TORCH_CHECK(t.device().index() == device,
                    "Expected all tensors to be on the same device, but found at least two "
                    "devices, emu:", static_cast<int>(device), " and ", t.device(), "!");
      }
      const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
      for (const auto& [known, alias] : same) {
        if (known == impl) return alias;
      }
      written = written ||
                std::find(written_impls.begin(), written_impls.end(), impl) != written_impls.end();
      at::Tensor alias = cpu_alias(t, written, &shared);
      same.emplace_back(impl, alias);
      return alias;
    };
    for (size_t i = 0; i < args.size(); ++i) {
      auto& v = args[i];
      const bool written = is_written_[i];
      if (v.isTensor()) {
        v = alias_of(v.toTensor(), false, written);
      } else if (v.isTensorList()) {
        auto list = v.toTensorList();
        c10::List<at::Tensor> aliased;
        aliased.reserve(list.size());
        for (const at::Tensor& t : list) aliased.push_back(alias_of(t, false, written));
        v = aliased;
      } else if (v.isList()) {
        auto list = v.toList();
        if (!list.empty() && (list.get(0).isTensor() || list.get(0).isNone())) {
          c10::List<std::optional<at::Tensor>> aliased;
          for (const c10::IValue& item : list) {
            if (item.isTensor()) {
              aliased.push_back(alias_of(item.toTensor(), true, written));
            } else {
              aliased.push_back(std::nullopt);
            }
          }
          v = aliased;
        }
      }
    }
    TORCH_CHECK(!host_tensor || device < 0,
                "Expected all tensors to be on the same device, but found at least two "
                "devices, emu:", static_cast<int>(device), " and cpu!");
    if (device < 0) device = tls_current_device;
    c10::DeviceGuard guard(c10::Device(kEmu, device));

    at::Generator emu_gen;
    at::Generator cpu_gen;
    if (generator_ >= 0) {
      emu_gen = args[generator_].isGenerator() ? args[generator_].toGenerator()
                                                 : default_generator(device);
      cpu_gen = at::make_generator<at::CPUGeneratorImpl>();
      std::lock_guard<std::mutex> lock(emu_gen.mutex());
      cpu_gen.set_state(emu_gen.get_state());
      args[generator_] = cpu_gen;
    }
    std::vector<at::Tensor> written_aliases;
    for (int i : written_) {
      written_aliases.push_back(args[i].isTensor() ? args[i].toTensor() : at::Tensor());
    }

    for (auto& v : args) torch::jit::push(*stack, std::move(v));
    {
      // The CPU kernel computes for emu: the CPU's autocast (torch.autocast("cpu")) must
      // not cast emu's operands, and emu's own autocast ran before this kernel.
      c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
      // The CPU kernel is how emu computes, not an op the program called: the profiler
      // sees the emu op with this kernel's time as its device time, and no CPU op inside.
      at::DisableRecordFunctionGuard device_internals;
      profiler::KernelTimer timer(profiler::EventKind::kernel, kernel_name_.c_str(), device);
      op.callBoxed(stack);
    }

    if (generator_ >= 0) {
      std::lock_guard<std::mutex> lock(emu_gen.mutex());
      emu_gen.set_state(cpu_gen.get_state());
    }
    for (size_t k = 0; k < written_.size(); ++k) {
      const auto& original = originals[written_[k]];
      if (original.isTensor() && original.toTensor().defined()) {
        sync_written(original.toTensor(), written_aliases[k]);
      }
    }
    const auto num_returns = returns_.size();
    const auto first_return = stack->size() - num_returns;
    for (size_t j = 0; j < num_returns; ++j) {
      auto& r = (*stack)[first_return + j];
      if (returns_[j] >= 0) {
        r = originals[returns_[j]];
      } else if (r.isTensor()) {
        at::Tensor t = r.toTensor();
        if (t.defined() && t.device().is_cpu()) r = to_device(t, device);
      } else if (r.isTensorList()) {
        c10::List<at::Tensor> moved;
        for (const at::Tensor& t : r.toTensorList()) moved.push_back(to_device(t, device));
        r = moved;
      }
    }
  }

 private:
  // The CPU kernel may have resized an out= alias.  Aliases are resizable
  // through the CPU allocator, so growing moved it to fresh CPU memory: resize
  // the emu tensor and copy the result back.  Shrinking or restriding kept the
  // data in place: only the metadata moves.
  static void sync_written(const at::Tensor& target, const at::Tensor& alias) {
    if (!alias.defined() || alias.device().type() != c10::kCPU || target.is_cpu()) return;
    if (alias.data_ptr() != target.data_ptr()) {
      if (target.sizes() != alias.sizes()) target.resize_(alias.sizes());
      if (target.strides() != alias.strides()) {
        at::Tensor t = target;
        t.set_(target.storage(), target.storage_offset(), alias.sizes(), alias.strides());
      }
      cpu_alias(target).copy_(alias);
    } else if (target.sizes() != alias.sizes() || target.strides() != alias.strides()) {
      at::Tensor t = target;
      t.set_(target.storage(), target.storage_offset(), alias.sizes(), alias.strides());
    }
  }

  std::string kernel_name_;  // its device events' name in torch.profiler
  std::vector<int> written_;
  std::vector<bool> is_written_;  // per argument: the kernel writes it
  int generator_ = -1;
  std::vector<int> returns_;
};

// One Library per declaration, named after the Python file and line that
// declared it, so that the dispatcher's own tables point at the declaration.
std::mutex derived_mutex;
std::vector<std::unique_ptr<torch::Library>> derived_libraries;
std::deque<std::string> derived_files;  // torch::Library keeps a pointer to its file name

void register_derived(c10::string_view overload, c10::string_view file, int64_t line) {
  std::string qualified(overload);
  TORCH_CHECK(qualified.rfind("aten::", 0) == 0, "emu: expected an aten:: overload, got ",
              qualified);
  const auto name = qualified.substr(6);
  const auto dot = name.find('.');
  const auto& handle = c10::Dispatcher::singleton().findSchemaOrThrow(
      ("aten::" + name.substr(0, dot)).c_str(),
      dot == std::string::npos ? "" : name.substr(dot + 1).c_str());
  std::lock_guard<std::mutex> lock(derived_mutex);
  derived_files.emplace_back(file);
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                                  c10::DispatchKey::PrivateUse1,
                                                  derived_files.back().c_str(),
                                                  static_cast<uint32_t>(line));
  library->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(
                                  std::make_unique<DerivedKernel>(handle.schema())));
  derived_libraries.push_back(std::move(library));
}

// ----------------------------------------------------------- CPU fallback --

std::mutex fallback_mutex;
std::map<std::string, int64_t> fallback_counter;
std::unique_ptr<torch::Library> fallback_library;

void counting_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  {
    const auto& name = op.schema().operator_name();
    std::string key = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
    std::lock_guard<std::mutex> lock(fallback_mutex);
    fallback_counter[key] += 1;
  }
  // As in DerivedKernel: the CPU's autocast must not cast emu's operands.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  at::native::cpu_fallback(op, stack);
}

// Registering a fallback is done by creating a Library object; destroying it
// deregisters the fallback, which is how the switch turns it off again.
void set_cpu_fallback(bool enabled) {
  std::lock_guard<std::mutex> lock(fallback_mutex);
  if (enabled && !fallback_library) {
    fallback_library = std::make_unique<torch::Library>(
        torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    fallback_library->fallback(torch::CppFunction::makeFromBoxedFunction<&counting_fallback>());
  } else if (!enabled) {
    fallback_library.reset();
  }
}

bool cpu_fallback_enabled() {
  std::lock_guard<std::mutex> lock(fallback_mutex);
  return fallback_library != nullptr;
}

std::tuple<std::vector<std::string>, std::vector<int64_t>> fallback_counts() {
  std::lock_guard<std::mutex> lock(fallback_mutex);
  std::vector<std::string> names;
  std::vector<int64_t> counts;
  for (const auto& [name, count] : fallback_counter) {
    names.push_back(name);
    counts.push_back(count);
  }
  return {names, counts};
}

void reset_fallback_counts() {
  std::lock_guard<std::mutex> lock(fallback_mutex);
  fallback_counter.clear();
}

// ------------------------------------------------------ operators for Python --

std::tuple<std::vector<std::string>, std::vector<int64_t>> native_kernels() {
  std::vector<std::string> names;
  std::vector<int64_t> lines;
  for (const auto& [name, line] : native_table()) {
    names.push_back(name);
    lines.push_back(line);
  }
  return {names, lines};
}

int64_t op_device_count() { return device_count(); }
int64_t op_current_device() { return tls_current_device; }
void op_set_device(int64_t index) { tls_current_device = resolve_index(index); }

std::vector<int64_t> memory_stats(int64_t index) {
  auto s = allocator.getDeviceStats(static_cast<c10::DeviceIndex>(index));
  constexpr auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return {s.allocated_bytes[agg].current, s.allocated_bytes[agg].peak,
          s.allocated_bytes[agg].allocated, s.allocated_bytes[agg].freed,
          s.allocation[agg].current, s.allocation[agg].peak,
          s.allocation[agg].allocated, s.allocation[agg].freed};
}

void reset_peak_memory_stats(int64_t index) {
  allocator.resetPeakStats(static_cast<c10::DeviceIndex>(index));
}

void reset_accumulated_memory_stats(int64_t index) {
  allocator.resetAccumulatedStats(static_cast<c10::DeviceIndex>(index));
}

c10::intrusive_ptr<c10::GeneratorImpl> generator_impl(int64_t index) {
  return default_generator(static_cast<c10::DeviceIndex>(index)).getIntrusivePtr();
}

at::Tensor get_rng_state(int64_t index) {
  auto gen = generator_impl(index);
  std::lock_guard<std::mutex> lock(gen->mutex_);
  return at::Tensor(gen->get_state());
}

void set_rng_state(int64_t index, const at::Tensor& state) {
  auto gen = generator_impl(index);
  std::lock_guard<std::mutex> lock(gen->mutex_);
  gen->set_state(*state.unsafeGetTensorImpl());
}

void manual_seed(int64_t index, int64_t seed) {
  auto gen = generator_impl(index);
  std::lock_guard<std::mutex> lock(gen->mutex_);
  gen->set_current_seed(static_cast<uint64_t>(seed));
}

int64_t seed(int64_t index) {
  auto gen = generator_impl(index);
  std::lock_guard<std::mutex> lock(gen->mutex_);
  return static_cast<int64_t>(gen->seed());
}

int64_t initial_seed(int64_t index) {
  return static_cast<int64_t>(generator_impl(index)->current_seed());
}

TORCH_LIBRARY(emu, m) {
  m.def("cpu_aliases(Tensor[] tensors, bool[] written=[]) -> Tensor[]", TORCH_FN(cpu_aliases));
  m.def("to_device(Tensor src, int index) -> Tensor", TORCH_FN(to_device));
  m.def("native_kernels() -> (str[], int[])", TORCH_FN(native_kernels));
  m.def("device_count() -> int", TORCH_FN(op_device_count));
  m.def("current_device() -> int", TORCH_FN(op_current_device));
  m.def("set_device(int index) -> ()", TORCH_FN(op_set_device));
  m.def("memory_stats(int index) -> int[]", TORCH_FN(memory_stats));
  m.def("reset_peak_memory_stats(int index) -> ()", TORCH_FN(reset_peak_memory_stats));
  m.def("reset_accumulated_memory_stats(int index) -> ()",
        TORCH_FN(reset_accumulated_memory_stats));
  m.def("get_rng_state(int index) -> Tensor", TORCH_FN(get_rng_state));
  m.def("set_rng_state(int index, Tensor state) -> ()", TORCH_FN(set_rng_state));
  m.def("manual_seed(int index, int seed) -> ()", TORCH_FN(manual_seed));
  m.def("seed(int index) -> int", TORCH_FN(seed));
  m.def("initial_seed(int index) -> int", TORCH_FN(initial_seed));
  m.def("set_cpu_fallback(bool enabled) -> ()", TORCH_FN(set_cpu_fallback));
  m.def("cpu_fallback_enabled() -> bool", TORCH_FN(cpu_fallback_enabled));
  m.def("fallback_counts() -> (str[], int[])", TORCH_FN(fallback_counts));
  m.def("reset_fallback_counts() -> ()", TORCH_FN(reset_fallback_counts));
  m.def("register_derived(str overload, str file, int line) -> ()", TORCH_FN(register_derived));
}

}  // namespace
}  // namespace emu

// `import torch_emu._C` only has to load this library: all the work is in the
// static registrations above.  Limited API, so the module is abi3.
static PyModuleDef emu_module = {PyModuleDef_HEAD_INIT, "torch_emu._C",
                                 "Native core of the emu backend (registrations only).", -1,
                                 nullptr};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&emu_module); }
