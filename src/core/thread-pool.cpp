#include "core/thread-pool.h"

#include <sched.h>
#include <unistd.h>

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

constexpr int kSpinIterations = 20000;

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
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
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
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
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = generation_.load(std::memory_order_acquire);
        for (int spin = 0; g == seen && spin < kSpinIterations; ++spin) {
            cpu_relax();
            g = generation_.load(std::memory_order_acquire);
        }
        while (g == seen) {
            generation_.wait(seen, std::memory_order_acquire);
            g = generation_.load(std::memory_order_acquire);
        }
        seen = g;
        if (stop_.load(std::memory_order_acquire)) return;
        thunk_(ctx_, index);
        n_pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

void ThreadPool::dispatch(Thunk thunk, void* ctx) {
    if (n_threads_ == 1) {
        thunk(ctx, 0);
        return;
    }
    thunk_ = thunk;
    ctx_ = ctx;
    n_pending_.store(n_threads_ - 1, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    generation_.notify_all();
    thunk(ctx, 0);
    while (n_pending_.load(std::memory_order_acquire) != 0) cpu_relax();
}

int physical_core_count() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        const unsigned n = std::thread::hardware_concurrency();
        return n ? static_cast<int>(n) : 1;
    }
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
