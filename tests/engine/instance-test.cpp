// An engine instance runs the deployment plan_deployment decides, and only
// that: the runner's plan is the deployment's plan term for term (the plan
// `headroom plan` prints comes from the same call), and a deployment decided
// otherwise (another context, another pool) is built as given, with no
// second decision inside the instance.
#include "engine/instance.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/units.h"
#include "memory/budget.h"

namespace headroom {
namespace {

InstanceOptions small_options() {
    InstanceOptions o;
    o.settings.config.max_model_len = 512;
    o.settings.config.max_num_seqs = 3;
    o.settings.config.n_threads = 2;
    o.settings.kv_cache_bytes = 24 * MiB;
    o.progress = false;
    return o;
}

void expect_same_plan(const MemoryPlan& got, const MemoryPlan& want) {
    EXPECT_EQ(got.config.device, want.config.device);
    EXPECT_EQ(got.config.max_model_len, want.config.max_model_len);
    EXPECT_EQ(got.config.max_num_seqs, want.config.max_num_seqs);
    EXPECT_EQ(got.config.n_threads, want.config.n_threads);
    EXPECT_EQ(got.config.n_cpu_layers, want.config.n_cpu_layers);
    EXPECT_EQ(got.budget_bytes, want.budget_bytes);
    EXPECT_EQ(got.weights_bytes, want.weights_bytes);
    EXPECT_EQ(got.kv_cache_bytes, want.kv_cache_bytes);
    ASSERT_EQ(got.kv_groups.size(), want.kv_groups.size());
    for (size_t i = 0; i < got.kv_groups.size(); ++i)
        EXPECT_EQ(got.kv_groups[i].n_blocks, want.kv_groups[i].n_blocks);
    EXPECT_EQ(got.activations_bytes(), want.activations_bytes());
    EXPECT_EQ(got.runtime_bytes(), want.runtime_bytes());
}

TEST(Instance, RunsTheDeploymentPlanDeploymentDecides) {
    Instance inst("smollm2-135m");
    const InstanceOptions o = small_options();
    kernels::Backend& backend = inst.open_backend(o);
    // The request as the instance makes it, and the decision taken apart.
    const DeploymentRequest request = deployment_request(backend, o);
    EXPECT_FALSE(request.device.gpu);
    EXPECT_EQ(request.device.total_bytes, detect_host_memory().total_bytes);
    const Deployment want = plan_deployment(inst.desc(), request);
    ASSERT_TRUE(want.mem().fits) << want.mem().refusal;
    inst.build(want, o);
    expect_same_plan(inst.runner().plan(), want.mem());
    // The pool by hand: SmolLM2 keeps 30 layers × 3 KV heads × 64 × 2 (K, V)
    // × 2 bytes = 23040 bytes a token; 24 MiB holds 68 blocks of 16 tokens.
    EXPECT_EQ(inst.runner().plan().kv_bytes_per_token, 23040u);
    EXPECT_EQ(inst.runner().cache().n_blocks_total(), 68u);
    // The ledger reserved what the plan said.
    EXPECT_EQ(inst.backend().ledger().snapshot()[Term::KvCache].reserved_bytes,
              inst.runner().plan().kv_cache_bytes);
}

TEST(Instance, BuildsAnotherDecisionAsGiven) {
    Instance inst("smollm2-135m");
    const InstanceOptions o = small_options();
    kernels::Backend& backend = inst.open_backend(o);
    Deployment d = plan_deployment(inst.desc(), deployment_request(backend, o));
    // Decided otherwise: a shorter context and a pool of two sequences' KV.
    PlanSettings s = d.plan.settings;
    s.config.max_model_len = 128;
    s.kv_cache_bytes = 2 * 128 * 23040;
    d.plan = evaluate(inst.desc(), d.device, s);
    ASSERT_TRUE(d.mem().fits) << d.mem().refusal;
    inst.build(d, o);
    EXPECT_EQ(inst.runner().plan().config.max_model_len, 128u);
    EXPECT_EQ(inst.runner().cache().n_blocks_total(), 2u * 128 / 16);
    expect_same_plan(inst.runner().plan(), d.mem());
}

TEST(Instance, RefusesWithThePlansNumbers) {
    Instance inst("smollm2-135m");
    InstanceOptions o = small_options();
    o.settings.kv_cache_bytes = 64 * 1024;  // not one sequence of 512 tokens (11.25 MiB)
    try {
        inst.load(o);
        FAIL() << "a pool of 64 KiB was accepted for 512 tokens";
    } catch (const Error& e) {
        const Deployment d = plan_deployment(inst.desc(), deployment_request(inst.backend(), o));
        EXPECT_FALSE(d.mem().fits);
        EXPECT_EQ(std::string(e.what()), d.mem().refusal);
    }
}

}  // namespace
}  // namespace headroom
