// Types shared by the lossy delta codecs of patcher/lossy/ (one file per strategy) and the
// model-level driver (lossy_delta.h).
//
// A codec encodes ONE tensor's delta, given as float32 values d = float32(target) -
// float32(base) computed element-wise in float32 (C order, `shape` outermost first), into a
// formats::WdeltaTensorOut (header meta + array records). Decoding adds the decoded delta into
// `acc`, which holds float32(base) on entry and the reconstruction on return, with exactly
// the float32 operations, in the order, that docs/wdelta.md specifies for that strategy (for
// the reference's three: what deltatensors' decompress_add_ does).
#ifndef BLZ_PATCHER_LOSSY_PAYLOAD_H_
#define BLZ_PATCHER_LOSSY_PAYLOAD_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "formats/wdelta.h"

namespace blz::lossy {

// One tensor of a .wdelta as read: its header object and its records by field name.
struct TensorPayload {
  std::string name;
  const nlohmann::ordered_json* meta = nullptr;  // never null once filled
  std::map<std::string, formats::WdeltaArrayView, std::less<>> fields;
  uint32_t version = 1;  // the file's format version
};

// Fills a TensorPayload for `name` from an open reader (every "_ref" field of its meta).
Result<TensorPayload> ReadPayload(const formats::WdeltaReader& reader, const std::string& name);

}  // namespace blz::lossy

#endif  // BLZ_PATCHER_LOSSY_PAYLOAD_H_
