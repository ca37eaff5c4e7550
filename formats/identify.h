// Structural identity of a path: what `blz id` prints. Reads headers only (never tensor data)
// and builds the format-neutral StructuralInput of formats/structural_hash.h, following
// las7/weight-inspect's rules where it defines them. The rules are specified in
// docs/structural-hash.md ("Paths: files, archives and directories"); summary:
//
//   *.safetensors  format "safetensors", no gguf_version, metadata = the "__metadata__"
//                  strings, each tensor {name, dtype lower-cased ("f32", "bf16"), shape as in
//                  the header, byte_length = end - begin}. Header only: the header is
//                  validated strictly (formats/safetensors.h), but the data section is not
//                  looked at, so it may be missing, truncated or followed by extra bytes (as
//                  weight-inspect's fixture tiny.safetensors is). Empty (0-element) tensors
//                  are hashed with byte_length 0 (weight-inspect refuses such files).
//   *.gguf         StructuralInputFromGguf over a header-only parse (GgufMode::kHeaderOnly).
//   .blz archive   the rule below over the archive's files of kind "safetensors" and "gguf",
//                  read from their stored header pieces (the archive layout is validated;
//                  data hashes are not checked).
//   directory      the same rule over its *.safetensors and *.gguf files (ListModelFiles:
//                  .git/ and .cache/ are skipped), so a directory and its archive have the same
//                  identity.
//
// The rule for a set of model files (other files, such as config.json, never count):
//   - none: kInvalidArgument;
//   - exactly one: that file's identity, as if it were given alone;
//   - several, all safetensors (shards): format "safetensors"; the tensors of all files
//     together; the metadata = the union of their "__metadata__" maps. A tensor name found in
//     two files, or a metadata key with different values in two files, is kUnsupported (the
//     error names both files);
//   - several, any of them GGUF: kUnsupported.
#ifndef BLZ_FORMATS_IDENTIFY_H_
#define BLZ_FORMATS_IDENTIFY_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "core/bytes.h"
#include "core/status.h"
#include "formats/blz_archive.h"
#include "formats/safetensors.h"
#include "formats/structural_hash.h"

namespace blz::formats {

enum class ModelPathKind : uint8_t {
  kDirectory,    // a model directory (formats/model_dir.h)
  kArchive,      // a file starting with the .blz magic "BLZARCH\n" (any name)
  kGguf,         // a file starting with the GGUF magic "GGUF", or named *.gguf
  kSafetensors,  // any other file named *.safetensors
};

// What kind of input `path` is, decided as listed above (magic bytes first, then the name).
// Errors: kNotFound, kIOError, kInvalidArgument (a special file), kUnsupported (a regular file
// that is none of these).
Result<ModelPathKind> DetectModelPath(const std::string& path);

// Parses a safetensors header without looking at the data section: `bytes` must hold at least
// the 8 + N header bytes; whatever follows them (nothing, part of the data, all of it, or more)
// is ignored. The header gets every check of ParseSafetensorsHeader except the ones against the
// file size; the returned file_size is 8 + N + (the largest data end the header declares).
// `file_name` is used in error messages. Errors: those of ParseSafetensorsHeader.
Result<SafetensorsHeader> ParseSafetensorsHeaderOnly(ByteSpan bytes, std::string_view file_name);

// The safetensors adapter (weight-inspect's rules, see the file comment).
StructuralInput StructuralInputFromSafetensors(const SafetensorsHeader& header);

// The structural input of an opened archive (the rule in the file comment over its model
// files). Errors name the archive and the file inside it.
Result<StructuralInput> StructuralInputFromArchive(const BlzArchive& archive);

// The structural input of a .safetensors file, a .gguf file, a .blz archive or a model
// directory (DetectModelPath decides which). Errors: DetectModelPath's, the parsers' (naming
// the file and byte offset), and the rule's (see the file comment).
Result<StructuralInput> StructuralInputFromPath(const std::string& path);

// Identify(StructuralInputFromPath(path)): the hash, the ID ("wi:gguf:3:d775e08a") and the
// counts that `blz id` prints with IdentityText / IdentityJson.
Result<StructuralIdentity> IdentifyPath(const std::string& path);

}  // namespace blz::formats

#endif  // BLZ_FORMATS_IDENTIFY_H_
