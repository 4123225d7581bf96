// emu's device events for torch.profiler, through torch's PrivateUse1 profiler registry.
//
// torch.profiler drives Kineto; a backend joins it by registering an activity profiler
// with torch's PrivateUse1ProfilerRegistry, which Kineto configures for every trace.  Ours records
// the kernels and copies the core times (emu_profiler.h) while a session is running, and
// hands them to Kineto when the trace is processed: kernels as CONCURRENT_KERNEL,
// copies as GPU_MEMCPY, the activity types torch reports with the PrivateUse1 device
// type.  Each event is linked to the ATen op that launched it through the correlation
// ids Kineto pushes around every op, so torch adds its time to that op's device time.
#include "emu_profiler.h"

#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/library.h>

#include <ActivityType.h>
#include <GenericTraceActivity.h>
#include <IActivityProfiler.h>
#include <libkineto.h>  // CpuTraceBuffer
#include <ThreadUtil.h>
#include <output_base.h>

#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace emu::profiler {

std::atomic<bool> recording{false};

namespace {

using libkineto::ActivityType;

struct Event {
  EventKind kind;
  std::string name;
  int device;
  int64_t start_ns;
  int64_t end_ns;
  uint64_t correlation;  // the launching op's, 0 when none was running
  int32_t thread;
};

// The ops running on this thread, innermost last (Kineto pushes and pops them).
thread_local std::vector<uint64_t> correlation_stack;

std::mutex events_mutex;
std::vector<Event> events;  // of the session recording now
bool want_kernels = false;
bool want_memcpy = false;

class EmuSession final : public libkineto::IActivityProfilerSession {
 public:
  explicit EmuSession(const std::set<ActivityType>& types)
      : kernels_(types.count(ActivityType::CONCURRENT_KERNEL) > 0),
        memcpy_(types.count(ActivityType::GPU_MEMCPY) > 0),
        span_(0, 0, "emu") {}

  ~EmuSession() override {
    if (status_ == libkineto::TraceStatus::RECORDING) stop();
  }

  void start() override {
    {
      std::lock_guard<std::mutex> lock(events_mutex);
      events.clear();
      want_kernels = kernels_;
      want_memcpy = memcpy_;
    }
    recording.store(kernels_ || memcpy_, std::memory_order_relaxed);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    recording.store(false, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(events_mutex);
    recorded_ = std::move(events);
    events.clear();
    status_ = libkineto::TraceStatus::READY;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked_activity, int64_t,
                    int64_t) override {
    // Kineto keeps pointers to what it logs until the trace is gone: so do we.
    for (const Event& e : recorded_) {
      const auto type = e.kind == EventKind::kernel ? ActivityType::CONCURRENT_KERNEL
                                                    : ActivityType::GPU_MEMCPY;
      auto& activity = activities_.emplace_back(span_, type, e.name);
      activity.startTime = e.start_ns;
      activity.endTime = e.end_ns;
      activity.id = static_cast<int32_t>(activities_.size());
      activity.device = e.device;
      activity.resource = 0;  // streams are bookkeeping on emu: one queue per device
      activity.threadId = e.thread;
      if (linked_activity && e.correlation != 0) {
        activity.linked = linked_activity(static_cast<int32_t>(e.correlation));
      }
      activity.addMetadataQuoted("device", "emu:" + std::to_string(e.device));
      logger.handleGenericActivity(activity);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{0, 0, "emu", "emu (emulated on host memory)"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  void pushCorrelationId(uint64_t id) override { correlation_stack.push_back(id); }

  void popCorrelationId() override {
    if (!correlation_stack.empty()) correlation_stack.pop_back();
  }

 private:
  bool kernels_;
  bool memcpy_;
  libkineto::TraceSpan span_;
  std::vector<Event> recorded_;
  std::deque<libkineto::GenericTraceActivity> activities_;  // stable addresses
};

class EmuActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& types, const libkineto::Config&) override {
    return std::make_unique<EmuSession>(types);
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t, int64_t, const std::set<ActivityType>& types,
      const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_{"emu"};
  std::set<ActivityType> activities_{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY};
};

// Registered when Python calls emu::register_profiler(), not at load, so that the
// no_profiler plant can leave emu without device events.
void register_profiler() {
  static std::once_flag once;
  std::call_once(once, [] {
    torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
        [] { return std::make_unique<EmuActivityProfiler>(); });
  });
}

TORCH_LIBRARY_FRAGMENT(emu, m) {
  m.def("register_profiler() -> ()", TORCH_FN(register_profiler));
}

}  // namespace

void record(EventKind kind, std::string name, int device, int64_t start_ns, int64_t end_ns) {
  const uint64_t correlation = correlation_stack.empty() ? 0 : correlation_stack.back();
  const int32_t thread = libkineto::systemThreadId();
  std::lock_guard<std::mutex> lock(events_mutex);
  if (!(kind == EventKind::kernel ? want_kernels : want_memcpy)) return;
  events.push_back({kind, std::move(name), device, start_ns, end_ns, correlation, thread});
}

}  // namespace emu::profiler
