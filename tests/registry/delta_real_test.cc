// GET /v2/<name>/blz/delta with the real DeltaFunction (LossyDeltaFunction, patcher/lossy) on
// real archives: the delta served, applied to the base, has the error the registry reported.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "formats/tensor_stats.h"
#include "patcher/lossy/lossy_delta.h"
#include "registry/delta_function.h"
#include "registry/registry.h"
#include "tests/formats/test_models.h"
#include "tests/registry/handler_harness.h"
#include "tests/test_util.h"

namespace blz::registry {
namespace {

using testing::BodyOf;
using testing::Harness;
using testing::PushVersion;

// A model big enough for lossy coding (tensors of at least 4096 elements), packed.
std::string ModelArchive(const blz::testing::TempDir& tmp, const std::string& name,
                         double perturb) {
  blz::testing::TestModelOptions o;
  o.layers = 1;
  o.hidden = 64;
  o.vocab = 128;
  o.seed = 5;
  o.perturb_scale = perturb;
  blz::testing::WriteTestModel(tmp / name, o);
  formats::PackStats stats;
  Status s = formats::Pack(tmp / name, tmp / (name + ".blz"), &stats);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return blz::testing::ReadFileBytes(tmp / (name + ".blz"));
}

TEST(DeltaHandlersRealTest, BitDeltaAppliedToTheBaseHasTheReportedError) {
  RegistryOptions o;
  o.create_delta = LossyDeltaFunction();
  o.storage.background = false;
  Harness h(o);
  blz::testing::TempDir tmp;
  const std::string base = ModelArchive(tmp, "base", 0);
  const std::string target = ModelArchive(tmp, "target", 0.01);
  const std::string v1 = PushVersion(&h, "org/real", "v1", base);
  const std::string v2 = PushVersion(&h, "org/real", "v2", target);
  Response delta = h.Call("GET", "/v2/org/real/blz/delta?from=" + v1 + "&to=" + v2 +
                                     "&strategy=bitdelta");
  ASSERT_EQ(delta.status, 200) << delta.body;
  EXPECT_EQ(delta.Get("X-Blz-Lossy"), "true");
  ASSERT_TRUE(delta.Get("X-Blz-Rel-L2").has_value());
  const double reported = std::strtod(delta.Get("X-Blz-Rel-L2")->c_str(), nullptr);
  EXPECT_GT(reported, 0.0);
  EXPECT_LT(std::stoull(*delta.Get("X-Blz-Full-Bytes")), 10u * target.size());
  blz::testing::WriteFileBytes(tmp / "d.wdelta", BodyOf(delta));

  auto base_model = formats::ModelTensors::Open(tmp / "base.blz");
  auto target_model = formats::ModelTensors::Open(tmp / "target.blz");
  ASSERT_TRUE(base_model.ok() && target_model.ok());
  lossy::ApplyOptions apply;
  apply.target = &*target_model;
  auto applied = lossy::ApplyDelta(*base_model, tmp / "d.wdelta", tmp / "out", apply);
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  ASSERT_TRUE(applied->error.has_value());
  EXPECT_NEAR(applied->error->rel_l2, reported, 1e-6 + 1e-3 * reported);
  EXPECT_NE(applied->output_digest, v2);
}

}  // namespace
}  // namespace blz::registry
