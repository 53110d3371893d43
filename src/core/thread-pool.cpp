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
    : n_threads_(n_threads < 1 ? 1 : n_threads),
      workers_(new Worker[n_threads < 1 ? 1 : n_threads]) {
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
    post_.generation.fetch_add(1);
    post_.generation.notify_all();
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
    Worker& me = workers_[index];
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = post_.generation.load(std::memory_order_acquire);
        if (g == seen) {
            const auto until = std::chrono::steady_clock::now() + kSpin;
            while (g == seen) {
                for (int i = 0; i < 64 && g == seen; ++i) {
                    cpu_relax();
                    g = post_.generation.load(std::memory_order_acquire);
                }
                if (g == seen && std::chrono::steady_clock::now() > until) break;
            }
        }
        while (g == seen) {
            // Either dispatch() sees us counted and wakes us, or we see its
            // new generation here, or (its store still in flight) it runs
            // our share itself and the next dispatch wakes us.
            n_sleeping_.fetch_add(1);
            g = post_.generation.load();
            if (g == seen) post_.generation.wait(seen);
            n_sleeping_.fetch_sub(1);
            g = post_.generation.load(std::memory_order_acquire);
        }
        seen = g;
        if (stop_.load(std::memory_order_acquire)) return;
        // Claim the share of the job we saw posted (its thunk and ctx came
        // with the generation). Failing, the caller ran it, and a newer job,
        // if any, is taken on the next pass.
        uint32_t expected = g - 1;
        if (!me.claimed.compare_exchange_strong(expected, g, std::memory_order_relaxed)) continue;
        post_.thunk(post_.ctx, index);
        me.done.store(g, std::memory_order_release);
    }
}

void ThreadPool::dispatch(Thunk thunk, void* ctx) {
    if (n_threads_ == 1) {
        thunk(ctx, 0);
        return;
    }
    // Only the caller writes the post while the pool runs: plain stores.
    const uint32_t g = post_.generation.load(std::memory_order_relaxed) + 1;
    post_.thunk = thunk;
    post_.ctx = ctx;
    post_.generation.store(g, std::memory_order_release);
    // Without a fence this load may pass the store above, so a worker that
    // goes to sleep at this very moment may miss the new generation. Then it
    // sleeps through this job, whose share the caller claims and runs below,
    // and the next dispatch, which sees it counted here, wakes it.
    if (n_sleeping_.load(std::memory_order_relaxed) > 0) post_.generation.notify_all();
    thunk(ctx, 0);
    for (int i = 1; i < n_threads_; ++i) {
        Worker& w = workers_[i];
        uint32_t expected = g - 1;
        if (w.claimed.compare_exchange_strong(expected, g, std::memory_order_relaxed)) {
            thunk(ctx, i);  // not started yet: run the share here rather than wait for it
            continue;
        }
        while (w.done.load(std::memory_order_acquire) != g) cpu_relax();
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
