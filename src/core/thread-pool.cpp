#include "core/thread-pool.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "core/check.h"

namespace headroom {

namespace {

struct WorkerArg {
    ThreadPool* pool;
    int index;
};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

// How long a worker spins for the next job before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(1000);

// The CPUs this process may run on; false if the kernel will not say.
bool affinity_mask(cpu_set_t& set) {
    CPU_ZERO(&set);
    return sched_getaffinity(0, sizeof(set), &set) == 0;
}

int hardware_threads() {
    const unsigned n = std::thread::hardware_concurrency();
    return n ? static_cast<int>(n) : 1;
}

}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads < 1 ? 1 : n_threads), slots_(new Slot[n_threads < 1 ? 1 : n_threads]) {
    threads_.resize(n_threads_ - 1);
    for (int i = 1; i < n_threads_; ++i) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, kWorkerStackBytes);
        auto* arg = new WorkerArg{this, i};
        const int rc = pthread_create(&threads_[i - 1], &attr, &ThreadPool::worker_main, arg);
        pthread_attr_destroy(&attr);
        HR_CHECK_MSG(rc == 0, "pthread_create failed");
    }
}

ThreadPool::~ThreadPool() {
    stop_.store(true);
    generation_.fetch_add(1);
    generation_.notify_all();
    for (auto& t : threads_) pthread_join(t, nullptr);
}

void* ThreadPool::worker_main(void* arg) {
    auto* a = static_cast<WorkerArg*>(arg);
    ThreadPool* pool = a->pool;
    const int index = a->index;
    delete a;
    pool->worker_loop(index);
    return nullptr;
}

void ThreadPool::worker_loop(int index) {
    Slot& slot = slots_[index];
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = generation_.load(std::memory_order_acquire);
        if (g == seen) {
            const auto until = std::chrono::steady_clock::now() + kSpin;
            while (g == seen) {
                for (int i = 0; i < 64 && g == seen; ++i) {
                    cpu_relax();
                    g = generation_.load(std::memory_order_acquire);
                }
                if (g == seen && std::chrono::steady_clock::now() > until) break;
            }
        }
        while (g == seen) {
            // seq_cst pairs with dispatch(): either it sees us sleeping and
            // wakes us, or we see its new generation here.
            n_sleeping_.fetch_add(1);
            g = generation_.load();
            if (g == seen) generation_.wait(seen);
            n_sleeping_.fetch_sub(1);
            g = generation_.load(std::memory_order_acquire);
        }
        seen = g;
        if (stop_.load(std::memory_order_acquire)) return;
        uint32_t expected = kPending;
        if (!slot.state.compare_exchange_strong(expected, kRunning, std::memory_order_acquire))
            continue;  // the caller ran this share
        thunk_(ctx_, index);
        slot.state.store(kIdle, std::memory_order_release);
    }
}

void ThreadPool::dispatch(Thunk thunk, void* ctx) {
    if (n_threads_ == 1) {
        thunk(ctx, 0);
        return;
    }
    thunk_ = thunk;
    ctx_ = ctx;
    for (int i = 1; i < n_threads_; ++i) slots_[i].state.store(kPending, std::memory_order_release);
    generation_.fetch_add(1);
    if (n_sleeping_.load() > 0) generation_.notify_all();
    thunk(ctx, 0);
    for (int i = 1; i < n_threads_; ++i) {
        uint32_t expected = kPending;
        if (slots_[i].state.compare_exchange_strong(expected, kIdle, std::memory_order_acquire)) {
            thunk(ctx, i);  // not started yet: run the share here rather than wait for it
            continue;
        }
        while (slots_[i].state.load(std::memory_order_acquire) != kIdle) cpu_relax();
    }
}

int usable_cpu_count() {
    cpu_set_t set;
    return affinity_mask(set) ? std::max(1, CPU_COUNT(&set)) : hardware_threads();
}

int physical_core_count() {
    cpu_set_t set;
    if (!affinity_mask(set)) return hardware_threads();
    // Count distinct (package, core) pairs among the CPUs we may run on.
    std::set<std::pair<int, int>> cores;
    int n_cpus = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (!CPU_ISSET(cpu, &set)) continue;
        ++n_cpus;
        const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
        std::ifstream core_file(base + "core_id"), pkg_file(base + "physical_package_id");
        int core = -1, pkg = -1;
        if (!(core_file >> core) || !(pkg_file >> pkg)) return n_cpus > 0 ? CPU_COUNT(&set) : 1;
        cores.emplace(pkg, core);
    }
    return cores.empty() ? 1 : static_cast<int>(cores.size());
}

}  // namespace headroom
