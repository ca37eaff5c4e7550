// fuzz_manifest: OCI manifest parsing (client/manifest.h ParseManifest). Property: a manifest
// it accepts, rebuilt with BuildManifestJson, parses back to the same fields.
#include <cstdint>
#include <string>
#include <string_view>

#include "client/manifest.h"
#include "fuzz/fuzz_util.h"

namespace {

void WriteSeeds() {
  blz::client::ModelConfig config;
  config.archive_digest = "sha256:" + std::string(64, 'a');
  config.archive_size = 12345;
  config.files = 2;
  config.tensors = 3;
  config.tensor_bytes = 4096;
  std::string config_json = blz::client::BuildConfigJson(config);
  blz::client::ModelManifest m;
  m.config_digest = "sha256:" + std::string(64, 'b');
  m.config_size = config_json.size();
  m.archive_digest = config.archive_digest;
  m.archive_size = config.archive_size;
  blz::fuzz::WriteSeed("crafted_manifest.json", blz::client::BuildManifestJson(m));
  m.title = "model-v2.blz";
  blz::fuzz::WriteSeed("crafted_manifest_title.json", blz::client::BuildManifestJson(m));
  blz::fuzz::WriteSeed("crafted_config.json", config_json);
  blz::fuzz::WriteSeed(
      "crafted_image_manifest.json",
      R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",)"
      R"("config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:)" +
          std::string(64, 'c') +
          R"(","size":7},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip",)"
          R"("digest":"sha256:)" +
          std::string(64, 'd') + R"(","size":32}]})");
}

}  // namespace

BLZ_FUZZ_INITIALIZE_WITH_SEEDS(WriteSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view json(reinterpret_cast<const char*>(data), size);
  auto m = blz::client::ParseManifest(json);
  if (!m.ok()) return 0;
  std::string rebuilt = blz::client::BuildManifestJson(*m);
  auto again = blz::client::ParseManifest(rebuilt);
  blz::fuzz::Check(again.ok(), "a rebuilt manifest parses");
  blz::fuzz::Check(again->config_digest == m->config_digest &&
                       again->config_size == m->config_size &&
                       again->archive_digest == m->archive_digest &&
                       again->archive_size == m->archive_size && again->title == m->title,
                   "a rebuilt manifest has the same fields");
  return 0;
}
