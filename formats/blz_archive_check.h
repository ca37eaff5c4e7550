// Checks of a .blz archive that read no tensor data (formats/blz_archive.h).
#ifndef BLZ_FORMATS_BLZ_ARCHIVE_CHECK_H_
#define BLZ_FORMATS_BLZ_ARCHIVE_CHECK_H_

#include "core/status.h"
#include "formats/blz_archive.h"

namespace blz::formats {

// The part of BlzArchive::Verify that reads no tensor data: each safetensors or GGUF file's
// stored header (its raw pieces) describes exactly its pieces (docs/blz-format.md rules 12-16).
// For an archive whose bytes were checked otherwise (client/pull_stream.h: every piece's
// xxh3-64 and every file's SHA-256 as it was rebuilt). Errors as Verify's (kCorruption naming
// the file and byte offset).
Status CheckStoredHeaders(const BlzArchive& archive);

class PackLayout;
// The same checks of an archive seen through its files (PackLayout::FromArchivePrefix: a
// version the local store keeps as files, client/local_store.h). `what` names it in errors.
Status CheckStoredHeaders(const PackLayout& layout, const std::string& what);

}  // namespace blz::formats

#endif  // BLZ_FORMATS_BLZ_ARCHIVE_CHECK_H_
