#include "patcher/lossy/payload.h"


namespace blz::lossy {

Result<TensorPayload> ReadPayload(const formats::WdeltaReader& reader, const std::string& name) {
  auto meta = reader.Meta(name);
  if (!meta.ok()) return meta.status();
  TensorPayload p;
  p.name = name;
  p.meta = *meta;
  p.version = reader.version();
  for (const auto& [key, value] : p.meta->items()) {
    if (!value.is_object() || !value.contains("_ref")) continue;
    if (!value["_ref"].is_string()) {
      return Status(Code::kCorruption, reader.path() + ": tensor '" + name + "' field '" + key +
                                           "': \"_ref\" is not a string");
    }
    auto field = reader.Field(name, value["_ref"].get<std::string>());
    if (!field.ok()) return field.status();
    p.fields.emplace(key, std::move(*field));
  }
  return p;
}

}  // namespace blz::lossy
